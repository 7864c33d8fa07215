#!/usr/bin/env bash
# Regenerates the Python stubs of proto/ (clients/python/switchboard/v1)
# with Debian's protoc and gRPC plugin (apt-get install protobuf-compiler
# protobuf-compiler-grpc), the versions that match Debian's python3-protobuf
# and python3-grpcio runtime the stubs are used with.
set -euo pipefail
cd "$(dirname "$0")/../.."
want="libprotoc 3.21.12"
got=$(protoc --version)
if [ "$got" != "$want" ]; then
  echo "generate.sh: protoc is '$got', the stubs are generated with '$want' (Debian 12's protobuf-compiler)" >&2
  exit 1
fi
plugin=$(command -v grpc_python_plugin)
out=clients/python
rm -f $out/switchboard/v1/*_pb2*.py
protoc -I proto -I /usr/include --python_out=$out --pyi_out=$out --grpc_python_out=$out \
  --plugin=protoc-gen-grpc_python="$plugin" proto/switchboard/v1/*.proto

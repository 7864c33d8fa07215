// Command k8srender prints the Kubernetes manifests an overlay of deploy/k8s
// renders to (what `kubectl apply -k` applies), or writes every overlay's to
// a folder:
//
//	go run ./tests/cmd/k8srender deploy/k8s/overlays/production
//	go run ./tests/cmd/k8srender -out build/k8s deploy/k8s
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/switchboard-ai/switchboard/tests/k8srender"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "k8srender:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("k8srender", flag.ContinueOnError)
	out := fs.String("out", "", "write every overlay of the deploy/k8s folder given to <out>/<overlay>.yaml instead of one overlay to stdout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: k8srender OVERLAY_DIR | k8srender -out DIR DEPLOY_K8S_DIR")
	}
	dir := fs.Arg(0)
	if *out == "" {
		y, err := k8srender.Render(dir)
		if err != nil {
			return err
		}
		_, err = stdout.Write(y)
		return err
	}
	names, err := k8srender.Overlays(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o750); err != nil {
		return err
	}
	for _, name := range names {
		y, err := k8srender.Render(filepath.Join(dir, k8srender.OverlaysDir, name))
		if err != nil {
			return err
		}
		path := filepath.Join(*out, name+".yaml")
		if err := os.WriteFile(path, y, 0o600); err != nil {
			return err
		}
		fmt.Fprintln(stdout, path)
	}
	return nil
}

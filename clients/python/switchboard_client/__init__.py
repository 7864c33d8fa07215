"""A Python caller of Switchboard's decider: decide, call the provider yourself, report.

    from switchboard_client import Router, ProviderError

    with Router("127.0.0.1:9090", token_file="/run/secrets/switchboard-token") as router:
        result = router.call(body, send, Router.identity(tenant_id="acme"))

The generated stubs are the package switchboard.v1 (router_pb2, router_pb2_grpc...).
"""

from .client import Attempt, Result, Router, TokenFile, Usage, channel
from .errors import (AllEndpointsFailed, DeadlineExceeded, InvalidRequest, ModelNotFound, NoEndpoint,
                     PermissionDenied, ProviderError, RateLimited, SwitchboardError, Unauthenticated, Unavailable)
from .prompt import PromptFigures, Prefix, figures

__all__ = [
    "AllEndpointsFailed", "Attempt", "DeadlineExceeded", "InvalidRequest", "ModelNotFound", "NoEndpoint",
    "PermissionDenied", "Prefix", "PromptFigures", "ProviderError", "RateLimited", "Result", "Router",
    "SwitchboardError", "TokenFile", "Unauthenticated", "Unavailable", "Usage", "channel", "figures",
]

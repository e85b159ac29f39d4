"""The evalsi server: the Reward Service and the Run Service over gRPC, Connect and HTTP JSON.

Beside it, over the same protocols, a project's uploaded evaluators (built in the sandbox), datasets and
evaluation jobs. Tokens, quotas, a shared score cache and Prometheus metrics. Needs the ``server`` extra
(``pip install 'evalsi[server]'``).

Start it with ``evalsi server --config server.yaml``; create tokens with ``evalsi server token create``.
"""

from evalsi.server._config import ServerConfig, config_from_mapping, load_config
from evalsi.server._db import open_database
from evalsi.server._run import build, serve, serve_async
from evalsi.server._token_store import TokenStore
from evalsi.server._tokens import PERMISSIONS, Principal
from evalsi.server.rewards._service import RewardService

__all__ = [
    "PERMISSIONS",
    "Principal",
    "RewardService",
    "ServerConfig",
    "TokenStore",
    "build",
    "config_from_mapping",
    "load_config",
    "open_database",
    "serve",
    "serve_async",
]

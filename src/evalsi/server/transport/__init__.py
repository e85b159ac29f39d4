"""The server's protocols: HTTP JSON, Connect and gRPC adapters over the services, the guard before every call."""

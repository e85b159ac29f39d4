"""The Reward Service: a project's batches scored against a RewardSpec made the server's, with its caches and probes."""

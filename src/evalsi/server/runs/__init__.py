"""The Run Service: a project's stored evaluation runs (records, scores, labels), its store and its checks."""

"""The core pack: exact-match, contains, regex, json-schema, field-score."""

"""Named recipes shipped with zoo (YAML files beside this one)."""

"""The `spio` command: info, compile, bench, tune."""

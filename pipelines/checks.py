"""Asset checks generated from the expectation suites (issue 4). Placeholder until they land."""

ASSET_CHECKS: list = []

"""Programs for people working on the repository (`make demo-alerts`); not part of the
exporter's package, which never imports them."""

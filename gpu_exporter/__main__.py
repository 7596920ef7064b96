"""`python -m gpu_exporter` runs the command-line program."""

from gpu_exporter.cli import main

raise SystemExit(main())

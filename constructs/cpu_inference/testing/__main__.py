"""`python -m cpu_inference.testing --crds DIR [--template FILE] [MANIFEST ...]`: the CRD schema + CEL check
(crd_validation.py) as a command."""

import sys

from cpu_inference.testing.crd_validation import main

sys.exit(main())

"""Moved to cpu_inference.testing.crd_validation (a test helper, not part of what the constructs render); this path
keeps old imports and `python -m cpu_inference.k8s.crd_validation` working."""

import sys

from ..testing.crd_validation import (  # noqa: F401
    CUSTOM_GROUPS,
    MANIFEST_TYPE,
    TOKEN,
    is_custom,
    load_schemas,
    main,
    template_objects,
    validate,
)

if __name__ == "__main__":
    sys.exit(main())

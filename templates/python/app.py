"""The component's entry point: componentize-py exports `Reconciler`."""

from tend_sdk import export
from {{name_snake}} import describe, reconcile

Reconciler = export(describe, reconcile)

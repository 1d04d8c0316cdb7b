"""The verification section every model-writing command's page ends with."""

from __future__ import annotations

from onnxsat.html.page import Page
from onnxsat.verification import VerificationResult


def add_verification(page: Page, result: VerificationResult | None, passed_means: str = "") -> None:
    """The verdict and, when outputs were compared, one row per output (mismatches tinted).

    ``passed_means`` says what a pass checked when no outputs were compared (a lossy pass only checks that
    the model loads and runs)."""
    page.heading("Verification")
    if result is None:
        page.paragraph("Not run.")
        return
    tolerance = f"rtol {result.tolerance.rtol:g}, atol {result.tolerance.atol:g}"
    verdict = "PASSED" if result.ok else "FAILED"
    detail = result.error or (passed_means if not result.outputs else tolerance)
    page.status(result.ok, f"verification {verdict}: {detail}")
    if result.outputs:
        page.table(
            ["output", "max abs diff", "max rel diff", "status", "note"],
            [(o.name, o.max_abs_diff, o.max_rel_diff, "ok" if o.ok else "MISMATCH", o.note) for o in result.outputs],
            bad_rows=[i for i, o in enumerate(result.outputs) if not o.ok],
        )

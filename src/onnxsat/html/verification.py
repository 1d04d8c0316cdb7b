"""The verification section every model-writing command's page ends with."""

from __future__ import annotations

from onnxsat.html.page import Page
from onnxsat.verification import VerificationResult


def add_verification(page: Page, result: VerificationResult | None, passed_means: str = "") -> None:
    """The verdict and, when outputs were compared, one row per output (mismatches tinted).

    ``passed_means`` says what a lossy pass checked (that the model loads and runs): its outputs changed on
    purpose, so no tolerance is claimed for them, and each row says how far it moved."""
    page.heading("Verification")
    if result is None:
        page.paragraph("Not run.")
        return
    tolerance = f"rtol {result.tolerance.rtol:g}, atol {result.tolerance.atol:g}"
    verdict = "PASSED" if result.ok else "FAILED"
    detail = result.error or (passed_means if passed_means or not result.outputs else tolerance)
    page.status(result.ok, f"verification {verdict}: {detail}")
    kept = "changed" if passed_means else "ok"
    if result.outputs:
        page.table(
            ["output", "max abs diff", "max rel diff", "status", "note"],
            [(o.name, o.max_abs_diff, o.max_rel_diff, kept if o.ok else "MISMATCH", o.note) for o in result.outputs],
            bad_rows=[i for i, o in enumerate(result.outputs) if not o.ok],
        )

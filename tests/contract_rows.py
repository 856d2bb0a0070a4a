"""Contract rows the validation tests share, restated here once rather than imported from the
package, so that a wrong edit to the package cannot agree with itself (docs/contract.md,
"Validation")."""

# The consistency rows, restated: label -> message, in order (both versions end v2's checks so).
CONSISTENCY = {
    "phase is post_share": "receipt phase is not post_share",
    "role is draft": "receipt role is not draft",
    "reason says eligible": "eligibility reason contradicts eligible",
    "decision facts eligible": "receipt decision facts contradict eligible",
    "draft embedding is the target's": "draft and target embedding snapshots are not one tensor",
    "head storage its own": "head weight storage is an embedding's or the target LM head's",
    "weight dtype exact": "head weight dtype is not torch.float8_e4m3fn",
    "draft embedding dtype exact": "draft input embedding dtype is not torch.bfloat16",
    "target embedding dtype exact": "target input embedding dtype is not torch.bfloat16",
    "target head dtype exact": "target LM head dtype is not torch.bfloat16",
    "numel = product of shape": "tensor snapshot numel is not the product of its shape",
    "positive scalar is one element": (
        "tensor snapshot says positive scalar but does not hold one element"
    ),
}

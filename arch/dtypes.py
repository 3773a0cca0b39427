"""Datapath precisions known to diptych and their storage sizes."""

from __future__ import annotations

#: Every precision a chip may support, narrowest first.
DTYPES: tuple[str, ...] = ("int4", "int8", "fp8", "bf16", "fp16", "fp32")

#: Storage size of one element in bytes (int4 packs two per byte).
DTYPE_BYTES: dict[str, float] = {
    "int4": 0.5,
    "int8": 1.0,
    "fp8": 1.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp32": 4.0,
}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype``; raises ValueError naming the known dtypes."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(
            f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}"
        ) from None


def check_dtype(dtype: str, what: str = "dtype") -> str:
    """Return ``dtype`` if it is a known precision, else raise ValueError naming ``what``."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"{what} must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return dtype

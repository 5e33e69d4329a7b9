"""The PGC paper's name for the gradient codes: :mod:`distlab.techniques.gradient_codes`.

The schemes (GC, PGC, IS-SGD, IS-GC: placement, encoding, decoding) are written once in the
shared techniques package, which the atlas uses too; this module re-exports them under the
name the paper's code and tests use.  Nothing is defined here.
"""

from ..techniques.gradient_codes import (SCHEMES, CodingError, Placement, Scheme, cr_placement, decode,  # noqa: F401
                                         encode, fr_placement, make_scheme, pgc_staleness, tandon_B)

__all__ = ["SCHEMES", "CodingError", "Placement", "Scheme", "cr_placement", "decode", "encode", "fr_placement",
           "make_scheme", "pgc_staleness", "tandon_B"]

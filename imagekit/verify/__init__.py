"""verify-copy: is a copy of an image content-identical to the official one?"""

from imagekit.verify.copy import LayerCheck, VerifyCopyResult, record_evidence, verify_copy
from imagekit.verify.diffids import GZIP_IMPL, diff_id

__all__ = ["GZIP_IMPL", "LayerCheck", "VerifyCopyResult", "diff_id", "record_evidence",
           "verify_copy"]

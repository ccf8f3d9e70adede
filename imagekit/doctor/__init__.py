"""`imagekit doctor`: whether this machine has what a role needs, before the role starts —
docker and buildx, the registries' credentials, the cluster and its RBAC, free disk, the
evidence store, the signing key — each a PASS, a FAIL that says why, or DEFERRED (not judged
here, never a pass)."""

from imagekit.doctor.models import Access, DoctorReport, Part, RegistryNeed, Role, parts_for
from imagekit.doctor.run import DoctorInputs, run_doctor

__all__ = ["Access", "DoctorInputs", "DoctorReport", "Part", "RegistryNeed", "Role",
           "parts_for", "run_doctor"]

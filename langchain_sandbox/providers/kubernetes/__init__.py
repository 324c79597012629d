"""The Kubernetes provider: sessions as kubernetes-sigs/agent-sandbox claims
(``pip install 'langchain-sandbox[kubernetes]'``).

See ``docs/kubernetes.md``. The SDK is imported only when a provider is built.
"""

from __future__ import annotations

from langchain_sandbox.providers.kubernetes.provider import (
    MANAGED_LABEL,
    METADATA_ANNOTATION,
    SESSION_LABEL,
    KubernetesProvider,
    claim_name,
)
from langchain_sandbox.providers.kubernetes.session import CAPABILITIES, KubernetesSession

__all__ = [
    "CAPABILITIES",
    "MANAGED_LABEL",
    "METADATA_ANNOTATION",
    "SESSION_LABEL",
    "KubernetesProvider",
    "KubernetesSession",
    "claim_name",
]

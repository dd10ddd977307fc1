"""Signed models (beyond 2.11.1): OpenSSF model signing's signatures, checked in the load's own pass.

``TensorDeserializer(path, signature=ModelSignature("model.sig", public_key="key.pub"))`` hashes the
loaded file as the engine reads it and the model's other files (configs, tokenizers) beside the
load, and raises ``HashMismatchError`` (a changed, missing or extra file, naming it and both
digests) or ``CryptographyError`` (a signature that does not verify) instead of returning tensors
unless every file of the model matches. Signatures come from ``model_signing sign key|certificate``
or ``tensorizer sign``; keyless Sigstore signatures are refused.
"""
import dataclasses
import os
from typing import Optional, Union

PathLike = Union[str, "os.PathLike[str]"]


@dataclasses.dataclass(frozen=True)
class ModelSignature:
    """Where a model's signature is and whom it must come from.

    Args:
        path: the signature bundle (``model.sig``).
        public_key: the signer's EC public key, PEM (key signatures).
        certificate_chain: trusted certificates, PEM, that the signing certificate must chain to
            (certificate signatures).
        model_root: the signed model's directory; default: the loaded file's directory, or the
            file alone when the signature covers one file.
    """

    path: PathLike
    public_key: Optional[PathLike] = None
    certificate_chain: Optional[PathLike] = None
    model_root: Optional[PathLike] = None

    def __post_init__(self):
        if self.public_key is None and self.certificate_chain is None:
            raise ValueError("ModelSignature needs public_key or certificate_chain")

    def _engine_args(self, model_path: str):
        """What _C's loads take: (model, signature, public key, certificate chain, model root)."""
        f = lambda p: "" if p is None else os.fspath(p)  # noqa: E731
        return (model_path, f(self.path), f(self.public_key), f(self.certificate_chain), f(self.model_root))

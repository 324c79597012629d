"""The per-session certificate authority the egress proxy terminates HTTPS with.

Each session gets its own CA: its certificate is the only one the sandbox trusts (the proxy's
variables point there), and its key lives in the host process's memory and nowhere else, so one
sandbox's CA means nothing to another sandbox or to the host. Leaf certificates are made per host
name on first use. Uses ``cryptography`` (the ``egress`` extra), imported when a policy needs it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
from typing import Any

from langchain_sandbox.errors import MissingDependencyError
from langchain_sandbox.network import ip_literal


def _crypto() -> Any:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        raise MissingDependencyError(
            "cryptography", "egress", purpose="A NetworkPolicy on the local provider"
        ) from None
    return x509, hashes, serialization, ec, NameOID


class SessionCA:
    """A CA made for one session, and the server TLS contexts it signs (one per host)."""

    def __init__(self, scratch_dir: str) -> None:
        """``scratch_dir``: a host directory the sandbox cannot see, where a leaf's key exists
        only for the moment ``ssl`` loads it (``load_cert_chain`` takes paths only)."""
        x509, hashes, serialization, ec, name_oid = _crypto()
        self._scratch_dir = scratch_dir
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(name_oid.COMMON_NAME, "langchain-sandbox session CA")])
        now = datetime.datetime.now(datetime.UTC)
        self._name = name
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.certificate_pem: bytes = self._cert.public_bytes(serialization.Encoding.PEM)
        self._contexts: dict[str, ssl.SSLContext] = {}

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a certificate for ``host`` (HTTP/1.1 only: one
        connection, one origin, so HTTP/2 connection coalescing cannot reach another host)."""
        if host not in self._contexts:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.set_alpn_protocols(["http/1.1"])
            certificate, key = self._leaf(host)
            fd, path = tempfile.mkstemp(dir=self._scratch_dir, suffix=".pem")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(certificate + key)
                context.load_cert_chain(path)
            finally:
                os.unlink(path)
            self._contexts[host] = context
        return self._contexts[host]

    def _leaf(self, host: str) -> tuple[bytes, bytes]:
        x509, hashes, serialization, ec, name_oid = _crypto()
        key = ec.generate_private_key(ec.SECP256R1())
        literal = ip_literal(host)
        alternative = (
            x509.IPAddress(ipaddress.ip_address(literal))
            if literal is not None
            else x509.DNSName(host)
        )
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(name_oid.COMMON_NAME, host[:64])]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.SubjectAlternativeName([alternative]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        return (
            certificate.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )


__all__ = ["SessionCA"]

"""How a kind cluster's workers find and trust its API server: file discovery against a CA made beforehand.

kind joins workers by bootstrap-token discovery: `kubeadm join` polls the cluster-info ConfigMap until
the controller-manager's bootstrap signer has signed it, every 5 s (kubeadm's DiscoveryRetryInterval).
The join starts right after `kubeadm init`, before the signer has run, so every join waited 5 or 10 s
for a signature (measured: 6.3 and 11.5 s of "Joining worker nodes" for one worker, 1.3 s of it work).

Here the cluster's CA is made before the cluster (kubeadm init uses a CA it finds in
/etc/kubernetes/pki), mounted into the control plane, and handed to the workers as a discovery
kubeconfig (kubeadm's file discovery): the join trusts the API server at once, pinned to that CA where
kind skips CA verification, and authenticates with a bootstrap token of this cluster's own, not kind's
well-known one.
"""

from __future__ import annotations

import base64
import datetime
import secrets
import string
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from testbed.clusters.kind.nodes import Mount

PKI_IN_NODE = "/etc/kubernetes/pki"
DISCOVERY_IN_NODE = "/kind/discovery.conf"
API_PORT_IN_NETWORK = 6443  # kind's control plane listens here on its Docker network
CA_VALIDITY = datetime.timedelta(days=3650)  # kubeadm's own CA validity
CLOCK_SKEW = datetime.timedelta(minutes=5)
TOKEN_ALPHABET = string.ascii_lowercase + string.digits  # kubeadm's bootstrap token format: [a-z0-9]{6}.[a-z0-9]{16}


@dataclass(frozen=True)
class JoinDiscovery:
    """The files of one cluster's join: its CA (control plane) and discovery kubeconfig (workers)."""

    ca_cert: Path
    ca_key: Path
    kubeconfig: Path
    token: str

    def control_plane_mounts(self) -> list[Mount]:
        return [Mount(str(self.ca_cert), f"{PKI_IN_NODE}/ca.crt", readonly=True),
                Mount(str(self.ca_key), f"{PKI_IN_NODE}/ca.key", readonly=True)]

    def worker_mounts(self) -> list[Mount]:
        return [Mount(str(self.kubeconfig), DISCOVERY_IN_NODE, readonly=True)]

    def kubeadm_patches(self) -> list[str]:
        """kind kubeadmConfigPatches (JSON merge patches: null removes kind's token discovery)."""
        init = {"kind": "InitConfiguration", "bootstrapTokens": [{"token": self.token}]}
        join = {"kind": "JoinConfiguration", "discovery": {"bootstrapToken": None, "tlsBootstrapToken": self.token,
                                                           "file": {"kubeConfigPath": DISCOVERY_IN_NODE}}}
        return [yaml.safe_dump(init, sort_keys=False), yaml.safe_dump(join, sort_keys=False)]


def bootstrap_token() -> str:
    """A fresh bootstrap token in kubeadm's format."""
    pick = lambda n: "".join(secrets.choice(TOKEN_ALPHABET) for _ in range(n))  # noqa: E731
    return f"{pick(6)}.{pick(16)}"


def make_ca(cert: Path, key: Path) -> bytes:
    """A self-signed cluster CA as kubeadm makes one (RSA 2048, CN kubernetes, 10 years); returns the cert PEM.
    The key is written owner-only."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - CLOCK_SKEW).not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, key_cert_sign=True, content_commitment=False,
                                     data_encipherment=False, key_agreement=False, crl_sign=False, encipher_only=False,
                                     decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(private.public_key()), critical=False)
        .sign(private, hashes.SHA256()))
    key.parent.mkdir(parents=True, exist_ok=True)
    key.touch(mode=0o600)
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                          serialization.NoEncryption()))
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    cert.write_bytes(pem)
    return pem


def discovery_kubeconfig(server: str, ca_pem: bytes) -> str:
    """A kubeconfig naming the API server and its CA, with no credentials (kubeadm's file discovery)."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "discovery",
        "clusters": [{"name": "cluster", "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "contexts": [{"name": "discovery", "context": {"cluster": "cluster", "user": "discovery"}}],
        "users": [{"name": "discovery", "user": {}}],
    }, sort_keys=False)


def prepare(folder: Path, kind_name: str) -> JoinDiscovery:
    """Make the CA, token and discovery kubeconfig of kind cluster `kind_name` under `folder`."""
    ca_cert, ca_key = folder / "pki" / "ca.crt", folder / "pki" / "ca.key"
    pem = make_ca(ca_cert, ca_key)
    kubeconfig = folder / "discovery.conf"
    kubeconfig.write_text(discovery_kubeconfig(f"https://{kind_name}-control-plane:{API_PORT_IN_NETWORK}", pem))
    return JoinDiscovery(ca_cert, ca_key, kubeconfig, bootstrap_token())

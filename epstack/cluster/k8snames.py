"""Kubernetes' own rules for the names and quantities a rendered job carries, so that a value the API
server would refuse (`--memory lots`, a label key with a space) is refused here, naming the flag,
before anything is written. The rules are those of k8s.io/apimachinery (resource.Quantity,
validation.IsQualifiedName, IsValidLabelValue, IsDNS1123Subdomain) and of the API's extended resources
(a domain-prefixed name outside kubernetes.io). Each parser returns the text or raises ValueError with
the fix."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# resource.Quantity: a signed decimal number and one suffix (binary SI, decimal SI or an exponent).
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+|)$"
)
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")  # a qualified name's name part
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
NAME_MAX = 63
SUBDOMAIN_MAX = 253
QUANTITY_EXAMPLE = "256Gi, 512Mi or 1.5T"


def quantity(text: str) -> str:
    """A positive resource.Quantity: memory, /dev/shm, huge pages, a volume's size."""
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"not a Kubernetes quantity; fix: a number and a unit, e.g. {QUANTITY_EXAMPLE}")
    try:
        positive = Decimal(match["number"]) > 0
    except InvalidOperation:  # "." alone: no digits
        positive = False
    if not positive:
        raise ValueError(f"must be more than 0; fix: e.g. {QUANTITY_EXAMPLE}")
    return text


def dns_subdomain(text: str) -> str:
    """A DNS-1123 subdomain: a storage class's name, a label key's prefix."""
    if len(text) > SUBDOMAIN_MAX or not _DNS_SUBDOMAIN.match(text):
        raise ValueError(
            f"not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most {SUBDOMAIN_MAX}); "
            "fix: e.g. efs-sc"
        )
    return text


def qualified_name(text: str, example: str = "topology.kubernetes.io/zone") -> str:
    """[PREFIX/]NAME: a label or annotation key, a topology key, a taint's key."""
    prefix, slash, name = text.rpartition("/")
    if slash:
        if not prefix:
            raise ValueError("an empty prefix before '/'; fix: e.g. example.com/name")
        dns_subdomain(prefix)
    if len(name) > NAME_MAX or not _NAME.match(name):
        raise ValueError(
            f"not a Kubernetes qualified name: [PREFIX/]NAME, NAME at most {NAME_MAX} of letters, digits, "
            f"'-', '_' and '.', starting and ending alphanumeric; fix: e.g. {example}"
        )
    return text


def label_value(text: str) -> str:
    """A label's value (an instance type is one: node.kubernetes.io/instance-type)."""
    if len(text) > NAME_MAX or not _LABEL_VALUE.match(text):
        raise ValueError(
            f"not a Kubernetes label value (at most {NAME_MAX} of letters, digits, '-', '_' and '.', "
            "starting and ending alphanumeric); fix: e.g. p5.48xlarge"
        )
    return text


def extended_resource(text: str) -> str:
    """A device plugin's resource: DOMAIN/NAME outside kubernetes.io, as the API requires."""
    qualified_name(text, example="rdma/ib")
    prefix, slash, _ = text.rpartition("/")
    if not slash or prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        raise ValueError(
            "an extended resource is DOMAIN/NAME outside kubernetes.io; fix: e.g. rdma/ib or "
            "vpc.amazonaws.com/efa"
        )
    return text


def label(text: str) -> tuple[str, str]:
    """KEY=VALUE of a label: a qualified key, a label value."""
    key, _, value = text.partition("=")
    try:
        qualified_name(key, example="example.com/role")
    except ValueError as exc:
        raise ValueError(f"key {key!r}: {exc}") from None
    try:
        label_value(value)
    except ValueError as exc:
        raise ValueError(f"value {value!r}: {exc}") from None
    return key, value

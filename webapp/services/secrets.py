"""Encryption of judge API keys at rest (Fernet). The key comes from STUDIO_ENCRYPTION_KEY or is derived from
SECRET_KEY, so a database dump alone never reveals a key."""
from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


def _fernet() -> Fernet:
    if settings.STUDIO_ENCRYPTION_KEY:
        return Fernet(settings.STUDIO_ENCRYPTION_KEY.encode())
    digest = hashlib.sha256(("rubric-studio-secrets:" + settings.SECRET_KEY).encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def secret_encrypt(*, plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def secret_decrypt(*, token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise ValueError(
            "a stored judge API key cannot be decrypted: SECRET_KEY or STUDIO_ENCRYPTION_KEY changed; "
            "enter the key again on the judge's form"
        ) from None

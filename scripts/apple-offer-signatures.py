#!/usr/bin/env python3
"""Offer signatures made by Apple's App Store Server Library (app-store-server-library on PyPI, installed in the
project's venv by scripts/install.sh), for the cross-check test of AppStoreOffers (Tests/AppStoreOffersTests).

Reads one JSON object on stdin: keyPath (a PKCS#8 PEM P-256 key minted by the test), keyId, issuerId, bundleId,
productId, offerIdentifier, transactionId, and a V1 case (applicationUsername, nonce, timestamp) with the
signature our code made for it (ourV1), and our JWS (ourPromotionalV2, ourIntroEligibility). Writes one JSON object:
Apple's library's JWS for the same inputs, its V1 signature, whether each of our signatures verifies here with the
key's public half (PyJWT for the JWS, with the audience Apple's library sets; `cryptography` for V1 over the payload
Apple's library builds), and our JWS's header and claims as PyJWT reads them.
"""
import json
import sys
import uuid

import jwt
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import ECDSA
from cryptography.hazmat.primitives.hashes import SHA256
import base64

from appstoreserverlibrary.jws_signature_creator import (
    IntroductoryOfferEligibilitySignatureCreator,
    PromotionalOfferV2SignatureCreator,
)
from appstoreserverlibrary.promotional_offer import PromotionalOfferSignatureCreator


def main() -> None:
    request = json.load(sys.stdin)
    key = open(request["keyPath"], "rb").read()
    public = serialization.load_pem_private_key(key, password=None).public_key()
    key_id, issuer_id, bundle_id = request["keyId"], request["issuerId"], request["bundleId"]

    v2 = PromotionalOfferV2SignatureCreator(key, key_id, issuer_id, bundle_id)
    intro = IntroductoryOfferEligibilitySignatureCreator(key, key_id, issuer_id, bundle_id)
    v1 = PromotionalOfferSignatureCreator(key, key_id, bundle_id)
    answer = {
        "promotionalV2": v2.create_signature(request["productId"], request["offerIdentifier"], request["transactionId"]),
        "promotionalV2WithoutTransaction": v2.create_signature(request["productId"], request["offerIdentifier"], None),
        "introEligibilityTrue": intro.create_signature(request["productId"], True, request["transactionId"]),
        "introEligibilityFalse": intro.create_signature(request["productId"], False, request["transactionId"]),
    }
    case = request["v1"]
    nonce = uuid.UUID(case["nonce"])
    answer["v1"] = v1.create_signature(request["productId"], request["offerIdentifier"], case["applicationUsername"], nonce, case["timestamp"])

    # Our V1 signature over the payload Apple's library signs (rebuilt as its create_signature does).
    payload = "\u2063".join([bundle_id, key_id, request["productId"], request["offerIdentifier"],
                             case["applicationUsername"].lower(), str(nonce).lower(), str(case["timestamp"])])
    try:
        public.verify(base64.b64decode(request["ourV1"]), payload.encode("utf-8"), ECDSA(SHA256()))
        answer["ourV1Verifies"] = True
    except InvalidSignature:
        answer["ourV1Verifies"] = False

    for name, audience in (("ourPromotionalV2", "promotional-offer"), ("ourIntroEligibility", "introductory-offer-eligibility")):
        try:
            claims = jwt.decode(request[name], public, algorithms=["ES256"], audience=audience, options={"verify_iat": True})
            answer[name] = {"verifies": True, "header": jwt.get_unverified_header(request[name]), "claims": claims}
        except jwt.PyJWTError as error:
            answer[name] = {"verifies": False, "error": str(error)}
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()

#!/bin/sh
# Regenerates the SchemaPin test vectors in this directory with openssl and python3
# (standard library only). Run from anywhere: sh testdata/schemapin/make-vectors.sh
#
# The canonical bytes are made with Python's
#   json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
# as SchemaPin does, and signed with "openssl dgst -sha256 -sign" (ECDSA P-256 over the
# SHA-256 of the canonical bytes, ASN.1 DER). vectors.json lists every case with its
# expected outcome.
set -eu
cd "$(dirname "$0")"

openssl ecparam -name prime256v1 -genkey -noout -out signer.key.pem
openssl ec -in signer.key.pem -pubout -out signer.pub.pem 2>/dev/null
openssl ecparam -name prime256v1 -genkey -noout -out other.key.pem
openssl ec -in other.key.pem -pubout -out wrong.pub.pem 2>/dev/null
rm other.key.pem
openssl ecparam -name secp384r1 -genkey -noout | openssl ec -pubout -out p384.pub.pem 2>/dev/null
# A PEM whose base64 body is cut short.
head -c 80 signer.pub.pem > malformed.pub.pem
printf '\n-----END PUBLIC KEY-----\n' >> malformed.pub.pem

cat > schema.json <<'JSON'
{
  "name": "get_weather",
  "description": "Current weather for a city — «météo»",
  "inputSchema": {
    "type": "object",
    "properties": {
      "city": {"type": "string", "maxLength": 100, "description": "City name, e.g. \"Paris\"\n"},
      "units": {"enum": ["metric", "imperial"], "default": "metric"},
      "days": {"type": "integer", "minimum": 1, "maximum": 7}
    },
    "required": ["city"],
    "additionalProperties": false
  }
}
JSON

python3 - <<'PY'
import json
s = json.load(open("schema.json", encoding="utf-8"))
open("schema.canonical.json", "w", encoding="utf-8").write(
    json.dumps(s, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
PY

openssl dgst -sha256 -sign signer.key.pem -out schema.sig.der schema.canonical.json
openssl dgst -sha256 -verify signer.pub.pem -signature schema.sig.der schema.canonical.json >/dev/null
base64 -w0 schema.sig.der > schema.sig.b64
rm schema.sig.der
# The SchemaPin reference form: the 32-byte SHA-256 digest itself signed with ECDSA-SHA256.
openssl dgst -sha256 -binary schema.canonical.json > schema.digest.bin
openssl dgst -sha256 -sign signer.key.pem -out schema.sig2.der schema.digest.bin
openssl dgst -sha256 -verify signer.pub.pem -signature schema.sig2.der schema.digest.bin >/dev/null
base64 -w0 schema.sig2.der > schema.sig.digest.b64
rm schema.sig2.der schema.digest.bin
fingerprint() { echo "sha256:$(openssl pkey -pubin -in "$1" -outform DER | sha256sum | cut -d' ' -f1)"; }
FINGERPRINT="$(fingerprint signer.pub.pem)"
WRONG_FINGERPRINT="$(fingerprint wrong.pub.pem)"
SCHEMA_HASH="$(sha256sum schema.canonical.json | cut -d' ' -f1)"
export FINGERPRINT WRONG_FINGERPRINT SCHEMA_HASH

python3 - <<'PY'
import base64, hashlib, json, os

sig = open("schema.sig.b64").read().strip()
schema = json.load(open("schema.json", encoding="utf-8"))
fp = os.environ["FINGERPRINT"]
fingerprints = {"signer.pub.pem": fp, "wrong.pub.pem": os.environ["WRONG_FINGERPRINT"]}

def canonical_hash(name):
    doc = json.load(open(name, encoding="utf-8"))
    doc.pop("signature", None)
    if isinstance(doc.get("schema"), dict) and set(doc) <= {"schema", "signed_at", "metadata"}:
        doc = doc["schema"]  # a signed-schema file: its schema member is what is signed
    canon = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()

assert canonical_hash("schema.json") == os.environ["SCHEMA_HASH"]

# The same signature as raw r||s, 32 bytes each.
der = base64.b64decode(sig)
assert der[0] == 0x30 and der[1] == len(der) - 2
def integer(b, i):
    assert b[i] == 0x02
    n = b[i + 1]
    return int.from_bytes(b[i + 2:i + 2 + n], "big"), i + 2 + n
r, i = integer(der, 2)
s, _ = integer(der, i)
open("schema.sig.raw.b64", "w").write(
    base64.b64encode(r.to_bytes(32, "big") + s.to_bytes(32, "big")).decode())

def write(name, text):
    open(name, "w", encoding="utf-8").write(text)

signed = dict(schema, signature=sig)
write("schema.signed.json", json.dumps(signed, indent=2, ensure_ascii=False) + "\n")

# Same content, members reversed at every level, other white space.
def rev(v):
    if isinstance(v, dict):
        return {k: rev(v[k]) for k in reversed(list(v))}
    if isinstance(v, list):
        return [rev(x) for x in v]
    return v
write("schema.reordered.json", json.dumps(rev(signed), indent="\t", separators=(" ,", " : ")) + "\n")

# One character of the description changed.
tampered = json.dumps(signed, indent=2, ensure_ascii=False).replace("Current weather", "Current weathen")
assert tampered != json.dumps(signed, indent=2, ensure_ascii=False)
write("schema.tampered.json", tampered + "\n")

# A signed-schema file as SchemaPin's signer writes it (create_signed_schema, json.dumps
# with indent=2): the schema, its reference-form signature, when it was signed, metadata.
def signed_file(schema):
    return json.dumps({"schema": schema, "signature": open("schema.sig.digest.b64").read().strip(),
        "signed_at": "2025-06-01T12:00:00.000000+00:00", "metadata": {"tool": "get_weather"}}, indent=2) + "\n"
write("schema.signedfile.json", signed_file(schema))
tampered_schema = json.loads(json.dumps(schema))
tampered_schema["inputSchema"]["properties"]["days"]["maximum"] = 70
write("schema.signedfile.tampered.json", signed_file(tampered_schema))

pub = open("signer.pub.pem").read()
write("keydoc.json", json.dumps({"schema_version": "1.1", "developer_name": "Example",
    "public_key_pem": pub, "revoked_keys": ["sha256:" + "0" * 64]}, indent=2) + "\n")
write("keydoc.revoked.json", json.dumps({"schema_version": "1.1", "developer_name": "Example",
    "public_key_pem": pub, "revoked_keys": [fp]}, indent=2) + "\n")

# key: an inline PEM file; key_url: a file served over HTTP by the test.
# error: the expected errcode when the outcome is an error rather than a result.
def case(name, schema, verified=False, key="signer.pub.pem", key_url="", signature="",
         error="", revoked=False):
    c = {"name": name, "schema": schema}
    if key_url:
        c["key_url"] = key_url
    else:
        c["key"] = key
    if signature:
        c["signature"] = signature
    if error:
        c["error"] = error
    else:
        c.update(verified=verified, revoked=revoked, schema_hash=canonical_hash(schema),
                 key_fingerprint=fp if key_url else fingerprints[key])
    return c

cases = [
    case("valid", "schema.signed.json", verified=True),
    case("valid-separate-signature", "schema.json", verified=True, signature="schema.sig.b64"),
    case("valid-raw-r-s", "schema.json", verified=True, signature="schema.sig.raw.b64"),
    case("valid-reference-form", "schema.json", verified=True, signature="schema.sig.digest.b64"),
    case("valid-key-document", "schema.signed.json", verified=True, key_url="keydoc.json"),
    case("valid-signed-schema-file", "schema.signedfile.json", verified=True),
    case("signed-schema-file-schema-changed", "schema.signedfile.tampered.json"),
    case("reordered-and-reformatted", "schema.reordered.json", verified=True),
    case("one-character-changed", "schema.tampered.json"),
    case("wrong-key", "schema.signed.json", key="wrong.pub.pem"),
    case("revoked-key", "schema.signed.json", key_url="keydoc.revoked.json", revoked=True),
    case("signature-missing", "schema.json"),
    case("malformed-pem", "schema.signed.json", key="malformed.pub.pem", error="invalid_request"),
    case("non-p256-key", "schema.signed.json", key="p384.pub.pem", error="invalid_request"),
]
write("vectors.json", json.dumps(cases, indent=2) + "\n")
PY
rm signer.key.pem
echo "vectors written; schema hash $SCHEMA_HASH, key $FINGERPRINT"

#include "support/test_certs.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace toposched::testing {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using BioPtr = std::unique_ptr<BIO, BioFree>;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "test_certs: %s failed\n", what);
    std::abort();
  }
}

PkeyPtr NewKey() {
  PkeyPtr key(EVP_EC_gen("P-256"));
  Check(key != nullptr, "EC key generation");
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx(&context, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_nconf_nid(nullptr, &context, nid, value);
  Check(extension != nullptr, value);
  Check(X509_add_ext(cert, extension, -1) == 1, "X509_add_ext");
  X509_EXTENSION_free(extension);
}

// Makes an unsigned certificate for `key` named `common_name`, issued by `issuer` (itself when
// null); the caller adds extensions and signs it.
X509Ptr NewCertificate(EVP_PKEY* key, const char* common_name, X509* issuer,
                       long serial) {  // NOLINT(google-runtime-int): OpenSSL's type
  X509Ptr cert(X509_new());
  Check(cert != nullptr, "X509_new");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 7L * 24 * 3600);
  Check(X509_set_pubkey(cert.get(), key) == 1, "X509_set_pubkey");
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name), -1, -1, 0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  Check(X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) == 1, "issuer name");
  AddExtension(cert.get(), signer, NID_subject_key_identifier, "hash");
  AddExtension(cert.get(), signer, NID_authority_key_identifier, "keyid:always");
  return cert;
}

void Sign(X509* cert, EVP_PKEY* key) { Check(X509_sign(cert, key, EVP_sha256()) > 0, "X509_sign"); }

std::string CertPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  Check(PEM_write_bio_X509(bio.get(), cert) == 1, "PEM_write_bio_X509");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);  // NOLINT(google-runtime-int)
  return std::string(data, static_cast<size_t>(size));
}

std::string KeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  Check(PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) == 1,
        "PEM_write_bio_PrivateKey");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);  // NOLINT(google-runtime-int)
  return std::string(data, static_cast<size_t>(size));
}

}  // namespace

TestPki GenerateTestPki() {
  TestPki pki;
  PkeyPtr ca_key = NewKey();
  X509Ptr ca = NewCertificate(ca_key.get(), "toposched test CA", nullptr, 1);
  AddExtension(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE");
  AddExtension(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  Sign(ca.get(), ca_key.get());
  pki.ca_cert_pem = CertPem(ca.get());

  PkeyPtr server_key = NewKey();
  X509Ptr server = NewCertificate(server_key.get(), "fake-apiserver", ca.get(), 2);
  AddExtension(server.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE");
  AddExtension(server.get(), ca.get(), NID_key_usage, "critical,digitalSignature");
  AddExtension(server.get(), ca.get(), NID_ext_key_usage, "serverAuth");
  const std::string names = std::string("IP:127.0.0.1,DNS:localhost,DNS:") + kFakeServerDnsName;
  AddExtension(server.get(), ca.get(), NID_subject_alt_name, names.c_str());
  Sign(server.get(), ca_key.get());
  pki.server_cert_pem = CertPem(server.get());
  pki.server_key_pem = KeyPem(server_key.get());

  PkeyPtr client_key = NewKey();
  X509Ptr client = NewCertificate(client_key.get(), "toposched-test-client", ca.get(), 3);
  AddExtension(client.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE");
  AddExtension(client.get(), ca.get(), NID_key_usage, "critical,digitalSignature");
  AddExtension(client.get(), ca.get(), NID_ext_key_usage, "clientAuth");
  Sign(client.get(), ca_key.get());
  pki.client_cert_pem = CertPem(client.get());
  pki.client_key_pem = KeyPem(client_key.get());
  return pki;
}

}  // namespace toposched::testing

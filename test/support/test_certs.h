// A throwaway PKI made in-process with OpenSSL for TLS tests: a CA, a server certificate for
// 127.0.0.1 / localhost / fake-apiserver.test, and a client certificate. EC P-256 keys, so making
// one takes milliseconds.
#ifndef TOPOSCHED_TEST_SUPPORT_TEST_CERTS_H_
#define TOPOSCHED_TEST_SUPPORT_TEST_CERTS_H_

#include <string>

namespace toposched::testing {

// The extra DNS name in the server certificate, for tls-server-name tests.
inline constexpr const char* kFakeServerDnsName = "fake-apiserver.test";

struct TestPki {
  std::string ca_cert_pem;
  std::string server_cert_pem;
  std::string server_key_pem;
  std::string client_cert_pem;  // CN=toposched-test-client, clientAuth
  std::string client_key_pem;
};

// Aborts on failure: without certificates no TLS test can run.
TestPki GenerateTestPki();

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_SUPPORT_TEST_CERTS_H_

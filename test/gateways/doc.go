// Package gateways is the gateway-interop suite: real gateways read what
// dualca writes, and real non-Go TLS stacks handshake through them across
// whole root rotations, cert-manager issuing and renewing the clients.
//
// nginx and HAProxy (Debian's packages, OpenSSL) serve mTLS on 127.0.0.1
// from files that a kubelet-like Projector writes atomically, seconds
// late, and are reloaded the way each is reloaded in production; Traefik
// v3 reads the Secrets from Kubernetes itself through its CRD provider.
// curl (OpenSSL) and gnutls-cli (GnuTLS) clients each load their own
// projected Secret and check the gateway's chain and name (ServerName).
//
// What a gateway reads is a Shape: which object and key each of its files
// comes from, so that a new target shape of dualca is one more value of
// Shapes. The suite (TestGateways, `make test`; `make gateways-report`
// writes docs/gateways.md) asserts, for every gateway, client stack, shape
// and root key algorithm, that the zero-downtime strategy fails no
// handshake across the rotations and that the legacy strategy fails some.
package gateways

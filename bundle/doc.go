// Package bundle is the rotation engine of dualca's zero-downtime strategy:
// everything that decides what the gateway Secret must hold, without
// talking to the API server.
//
// It holds four parts:
//
//   - Parsing and validation (pem.go, root.go, client.go, state.go): strict
//     parsing of the PEM found in Secrets (input may have been edited by
//     hand, so anything unexpected is rejected with an InvalidError that is
//     safe to show in an event or log line), validation of the root CA
//     Secret, client Secrets as cert-manager writes them, and the state
//     recorded in the gateway Secret's annotations.
//   - The trust set (set.go, trust.go): fingerprints, chain checks (with
//     Memory to remember them), and a canonical, deterministic ordering
//     and encoding of the roots in ca.crt, so that the gateway reloads only
//     when the set really changes. What decisions remember from one
//     reconcile to the next (Memory, Parsed) is kept by the types of
//     bundle/internal/memo, whose doc says what identifies an entry and
//     what a hit promises.
//   - The server credential (server.go, crosschain.go): a leaf issued from
//     the root the server switches to, followed by a chain of
//     cross-certificates that every client population can verify.
//   - The rules of a rotation (one file each: adopt, repair, rotate, create,
//     switch, notyetvalid, retire, renew, phase, nextcheck), composed by
//     Plan into a Decision: the gateway Secret to write, the events, the
//     clients due for renewal and when to decide again. docs/rotation.md
//     describes the rules, docs/design.md the invariants they keep.
//
// The package depends only on the standard library, holds no package-level
// mutable state and never reads the clock: every time-dependent function
// takes the current time as a parameter, which keeps decisions reproducible
// in tests and lets the model test drive them through random histories.
package bundle

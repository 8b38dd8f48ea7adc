// Package memo remembers what the decisions of package bundle compute
// about certificates, so that a reconcile at rest, which asks the same
// questions about the same certificates as the one before, computes
// almost nothing. Everything remembered is a pure function of the bytes it
// is keyed by, so an entry found is never stale: a hit promises exactly
// the answer that computing it again would give.
//
// # Identity
//
// A key names what an answer is a function of, in one of two ways:
//
//   - By digest: the SHA-256 of a certificate's DER bytes (Raw), or of its
//     public key (RawSubjectPublicKeyInfo). Two certificates with the same
//     bytes are the same certificate wherever they were parsed, so a digest
//     key holds across decisions, restarts of the tracker's parse and
//     copies. Verdicts and Signers are keyed this way.
//   - By address: a *x509.Certificate, as parsed once by whoever handed it
//     to a decision (the gateway's PEM through PEM, a client's leaf by the
//     tracker). Digests, Answers and the bond Tables are keyed this way,
//     because hashing the bytes again is what they spare. An address is a
//     safe key only because of three rules that dualca keeps: a parsed
//     x509.Certificate is never modified (whoever parses a changed Secret
//     parses it into new values); an entry holds its key, so the
//     certificate stays alive and its address cannot be reused by another
//     one while the entry is there; and an address only ever saves work
//     that a digest would also find (a certificate parsed twice is two
//     keys with equal answers, never two certificates with one key).
//
// PEM is keyed by the PEM bytes themselves (a copy), and by the kind of
// parse asked for: the same bytes parse differently as a lenient ca.crt
// and as a strict tls.crt.
//
// # Lifetime and bounds
//
// Whoever decides repeatedly starts a generation before each decision
// (bundle.Memory.Advance). Recent, which Digests, Verdicts and Signers
// are built on, forgets what was not used in the current generation or
// the one before, at a sweep that runs when it has doubled; Answers holds
// one generation only; Tables forgets the roots not asked about for a
// generation, and each table the items no longer listed. Every type has
// a hard bound as well (it starts again empty when full), for a caller
// that never starts a generation: memory is bounded whatever the caller
// does, and emptying costs only recomputation.
//
// # Concurrency
//
// Recent, Digests, Verdicts, Signers, Answers and Bonds are not safe for
// concurrent use: their owner (bundle.Memory) holds one lock over them
// all. A Table, and PEM, lock themselves, since their work (a bond per
// client, a parse) runs outside the owner's lock.
package memo

package syncer

import "unicode/utf8"

// maxEventNote is the longest note the events API accepts, in bytes: it
// refuses a longer one, and the event is lost ("Server rejected event
// (will not retry!)"). A decision that retires many roots at once makes
// one RootRetired event naming them all (sameReasonTogether), longer than
// that after a dozen.
const maxEventNote = 1024

// eventCut ends a note cut to fit.
const eventCut = " …"

// note is msg cut to fit an event's note, at a character boundary; the
// whole message is in the log line that goes with it.
func note(msg string) string {
	if len(msg) <= maxEventNote {
		return msg
	}
	n := maxEventNote - len(eventCut)
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return msg[:n] + eventCut
}

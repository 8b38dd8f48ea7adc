// Package apirequest records the requests a Kubernetes client sends, as
// RBAC sees them (verb, API group, resource, namespace, name) with the
// status code the API server answered, for the tests that check what
// dualca asked of the API server: the chart's RBAC and the conflict storm.
package apirequest

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/fields"
)

// Request is one API request as RBAC sees it, with its answer's code.
type Request struct {
	Verb, Group, Resource, Namespace, Name string
	Code                                   int
	// LabelSelector is a list's or watch's label selector, as sent.
	LabelSelector string
	// InitialEvents says a watch asked for the current objects first
	// (sendInitialEvents=true): a streaming list, which client-go's
	// informers use instead of a list where the API server supports it.
	InitialEvents bool
	// Compressed says the answer came gzip-compressed (the transport
	// decompressed it): the client accepted gzip.
	Compressed bool
}

// Writes reports whether the request writes: a create, update, patch or
// delete.
func (r Request) Writes() bool {
	switch r.Verb {
	case "create", "update", "patch", "delete":
		return true
	}
	return false
}

// String is the request and its answer on one line, for a log.
func (r Request) String() string {
	return fmt.Sprintf("%s %s/%s %s/%s -> %d", r.Verb, r.Group, r.Resource, r.Namespace, r.Name, r.Code)
}

// Parse turns an API request into RBAC's attributes: the verb, the
// resource with its subresource, and the name, taken from a metadata.name
// field selector for a list or watch as the API server does. ok is false
// for anything but a resource request (discovery).
func Parse(req *http.Request) (r Request, ok bool) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) > 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) > 3 && parts[0] == "apis":
		r.Group, parts = parts[1], parts[3:]
	default:
		return r, false
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		r.Namespace, parts = parts[1], parts[2:]
	}
	r.Resource = parts[0]
	if len(parts) > 1 {
		r.Name = parts[1]
	}
	if len(parts) > 2 {
		r.Resource += "/" + parts[2]
	}
	q := req.URL.Query()
	switch req.Method {
	case http.MethodGet:
		switch {
		case r.Name != "":
			r.Verb = "get"
		case q.Get("watch") == "true" || q.Get("watch") == "1":
			r.Verb = "watch"
		default:
			r.Verb = "list"
		}
	case http.MethodPost:
		r.Verb = "create"
	case http.MethodPut:
		r.Verb = "update"
	case http.MethodPatch:
		r.Verb = "patch"
	case http.MethodDelete:
		r.Verb = "delete"
	}
	if r.Verb == "list" || r.Verb == "watch" {
		r.LabelSelector = q.Get("labelSelector")
	}
	r.InitialEvents = r.Verb == "watch" && q.Get("sendInitialEvents") == "true"
	if r.Name == "" && (r.Verb == "list" || r.Verb == "watch") {
		if sel, err := fields.ParseSelector(q.Get("fieldSelector")); err == nil {
			r.Name, _ = sel.RequiresExactMatch("metadata.name")
		}
	}
	return r, true
}

// Log records the requests a client made and their status codes: give
// Wrap to rest.Config.Wrap.
type Log struct {
	mu   sync.Mutex
	reqs []Request
}

type transportFunc func(*http.Request) (*http.Response, error)

func (f transportFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Wrap is rt recording every resource request it answers into l.
func (l *Log) Wrap(rt http.RoundTripper) http.RoundTripper {
	return transportFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if r, ok := Parse(req); ok && err == nil {
			r.Code, r.Compressed = resp.StatusCode, resp.Uncompressed
			l.mu.Lock()
			l.reqs = append(l.reqs, r)
			l.mu.Unlock()
		}
		return resp, err
	})
}

// All returns the requests recorded so far, in the order they were answered.
func (l *Log) All() []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

// Summary counts the requests by verb and resource.
func (l *Log) Summary() []string {
	counts := map[string]int{}
	for _, r := range l.All() {
		counts[fmt.Sprintf("%s %s/%s", r.Verb, r.Group, r.Resource)]++
	}
	out := make([]string, 0, len(counts))
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		out = append(out, fmt.Sprintf("%s ×%d", k, counts[k]))
	}
	return out
}

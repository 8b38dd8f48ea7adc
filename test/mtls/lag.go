package mtls

import (
	"context"
	mrand "math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// UniformLag returns a lag drawn uniformly from [lo, hi] at each call: a
// kubelet's volume sync or an SDS push takes a few seconds, never the same.
// Zero for hi <= 0.
func UniformLag(lo, hi time.Duration) func() time.Duration {
	return func() time.Duration {
		if hi <= 0 {
			return 0
		}
		if hi <= lo {
			return hi
		}
		return lo + mrand.N(hi-lo+1) //nolint:gosec // G404: a lag to simulate, not a secret
	}
}

// Lagged returns Secrets that deliver each version that s delivers only
// after lag() has passed since it came, the way a gateway or an agent that
// reads a mounted volume or an SDS push takes it into use seconds late.
// Versions still come in order: one is never delivered before the one
// before it, so a slow version never overwrites a newer one. A nil lag
// returns s itself.
func Lagged(s Secrets, lag func() time.Duration) Secrets {
	if lag == nil {
		return s
	}
	return lagged{s: s, lag: lag}
}

type lagged struct {
	s   Secrets
	lag func() time.Duration
}

// pending is a version waiting for its moment.
type pending struct {
	secret *corev1.Secret
	due    time.Time
}

func (l lagged) Watch(ctx context.Context, name string, update func(*corev1.Secret)) func() {
	var (
		mu    sync.Mutex
		queue []pending
		last  time.Time
	)
	wake := make(chan struct{}, 1)
	innerWait := l.s.Watch(ctx, name, func(s *corev1.Secret) {
		mu.Lock()
		due := time.Now().Add(l.lag())
		if due.Before(last) {
			due = last
		}
		last = due
		queue = append(queue, pending{secret: s, due: due})
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			mu.Lock()
			var next *pending
			if len(queue) > 0 {
				next = &queue[0]
			}
			mu.Unlock()
			if next != nil {
				t := time.NewTimer(time.Until(next.due))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				mu.Lock()
				s := queue[0].secret
				queue = queue[1:]
				mu.Unlock()
				update(s)
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
		}
	}()
	return func() {
		innerWait()
		<-done
	}
}

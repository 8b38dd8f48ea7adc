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

func (l lagged) Watch(ctx context.Context, name string, update func(*corev1.Secret)) func() {
	q := NewLagQueue[*corev1.Secret](l.lag)
	innerWait := l.s.Watch(ctx, name, q.Push)
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.Run(ctx, update)
	}()
	return func() {
		innerWait()
		<-done
	}
}

// LagQueue hands on each value pushed once lag() has passed since it was
// pushed, in the order pushed: a value is never handed on before the one
// pushed before it, so a slow version never overwrites a newer one.
type LagQueue[T any] struct {
	lag   func() time.Duration
	mu    sync.Mutex
	queue []delayed[T]
	last  time.Time
	wake  chan struct{}
}

// delayed is a value waiting for its moment.
type delayed[T any] struct {
	value T
	due   time.Time
}

// NewLagQueue is an empty queue delaying by lag.
func NewLagQueue[T any](lag func() time.Duration) *LagQueue[T] {
	return &LagQueue[T]{lag: lag, wake: make(chan struct{}, 1)}
}

// Push queues v, due lag() from now, never before the value pushed before it.
func (q *LagQueue[T]) Push(v T) {
	q.mu.Lock()
	due := time.Now().Add(q.lag())
	if due.Before(q.last) {
		due = q.last
	}
	q.last = due
	q.queue = append(q.queue, delayed[T]{value: v, due: due})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Run hands each value to deliver when it is due, until ctx ends.
func (q *LagQueue[T]) Run(ctx context.Context, deliver func(T)) {
	for {
		q.mu.Lock()
		var next *delayed[T]
		if len(q.queue) > 0 {
			next = &q.queue[0]
		}
		q.mu.Unlock()
		if next == nil {
			select {
			case <-ctx.Done():
				return
			case <-q.wake:
				continue
			}
		}
		t := time.NewTimer(time.Until(next.due))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		q.mu.Lock()
		v := q.queue[0].value
		q.queue = q.queue[1:]
		q.mu.Unlock()
		deliver(v)
	}
}

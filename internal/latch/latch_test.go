package latch

import (
	"errors"
	"sync"
	"testing"
)

func TestFirstErrorWins(t *testing.T) {
	t.Parallel()
	l := New()
	if l.Err() != nil {
		t.Fatal("an error before Set")
	}
	errs := []error{errors.New("a"), errors.New("b"), errors.New("c")}
	var wg sync.WaitGroup
	var sets sync.Map
	for _, err := range errs {
		wg.Go(func() {
			if l.Set(err) {
				sets.Store(err, true)
			}
		})
	}
	wg.Wait()
	<-l.Done()
	n := 0
	sets.Range(func(k, _ any) bool {
		n++
		if k.(error) != l.Err() {
			t.Errorf("Set reported %v, Err is %v", k, l.Err())
		}
		return true
	})
	if n != 1 {
		t.Fatalf("%d Set calls reported setting, want 1", n)
	}
}

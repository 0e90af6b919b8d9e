package cow

import (
	"sync"
	"testing"
)

func TestUpdateIsWholeOrNothing(t *testing.T) {
	var m Map[int, int]
	if _, ok := m.Load(1); ok {
		t.Fatal("the zero Map holds a key")
	}
	m.Update(func(next map[int]int) bool { next[1] = 10; return true })
	m.Update(func(next map[int]int) bool { next[2] = 20; return false }) // refused
	if v, ok := m.Load(1); !ok || v != 10 {
		t.Fatalf("Load(1) = %d, %v; want 10, true", v, ok)
	}
	if _, ok := m.Load(2); ok || m.Len() != 1 {
		t.Fatalf("an edit that returned false was stored: Len %d", m.Len())
	}
}

// Readers never see a map that an edit is still making: every key that
// an edit writes together is read together.
func TestReadersSeeWholeEdits(t *testing.T) {
	var m Map[int, int]
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				a, _ := m.Load(1)
				b, _ := m.Load(2)
				// Each edit sets both keys to the same value; a reader may
				// fall between two edits (b newer than a) but a torn map
				// would show a ahead of b.
				if a > b {
					t.Errorf("key 1 = %d ahead of key 2 = %d", a, b)
					return
				}
			}
		})
	}
	for i := 1; i <= 2000; i++ {
		m.Update(func(next map[int]int) bool { next[2] = i; next[1] = i; return true })
	}
	close(stop)
	wg.Wait()
}

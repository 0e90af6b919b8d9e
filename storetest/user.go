package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	seckill "github.com/seckill/seckill"
)

func (s suite) testEnsureUser(t *testing.T) {
	st := s.store(t)
	before := time.Now()
	u, created, err := st.EnsureUser(t.Context(), "+8613800138000")
	after := time.Now()
	if err != nil {
		t.Fatalf("EnsureUser: %v", err)
	}
	if !created {
		t.Error("EnsureUser of a new phone reported created = false")
	}
	if u.ID <= 0 || u.Phone != "+8613800138000" {
		t.Errorf("EnsureUser = %+v; want a positive id and the phone", u)
	}
	checkNow(t, "new user's CreatedAt", u.CreatedAt, before, after)
	checkUTC(t, "new user's CreatedAt", u.CreatedAt)

	again, created, err := st.EnsureUser(t.Context(), "+8613800138000")
	if err != nil {
		t.Fatalf("EnsureUser again: %v", err)
	}
	if created {
		t.Error("EnsureUser of a known phone reported created = true")
	}
	if diff := cmp.Diff(u, again); diff != "" {
		t.Errorf("EnsureUser of a known phone (-first +again):\n%s", diff)
	}

	other, created, err := st.EnsureUser(t.Context(), "+8613900139000")
	if err != nil {
		t.Fatalf("EnsureUser of another phone: %v", err)
	}
	if !created || other.ID == u.ID {
		t.Errorf("EnsureUser of another phone = %+v, created %v; want a new user", other, created)
	}

	got, err := st.User(t.Context(), u.ID)
	if err != nil {
		t.Fatalf("User(%d): %v", u.ID, err)
	}
	if diff := cmp.Diff(u, got); diff != "" {
		t.Errorf("User(%d) (-ensured +got):\n%s", u.ID, diff)
	}
	checkUTC(t, "User", got.CreatedAt)
}

func (s suite) testEnsureUserConcurrent(t *testing.T) {
	st := s.store(t)
	const n = 50
	type result struct {
		u       *seckill.User
		created bool
		err     error
	}
	results := make([]result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			<-start
			u, created, err := st.EnsureUser(t.Context(), "13700000000")
			results[i] = result{u, created, err}
		})
	}
	close(start)
	wg.Wait()

	var id int64
	createdBy := 0
	for i, r := range results {
		if r.err != nil {
			t.Errorf("EnsureUser call %d: %v", i, r.err)
			continue
		}
		if id == 0 {
			id = r.u.ID
		}
		if r.u.ID != id {
			t.Errorf("EnsureUser call %d returned user %d; another call returned %d", i, r.u.ID, id)
		}
		if r.created {
			createdBy++
		}
	}
	if createdBy != 1 {
		t.Errorf("%d of %d concurrent EnsureUser calls for one phone reported created; want exactly 1", createdBy, n)
	}
}

// testEnsureUserLegacy: a user stored under a legacy form of a phone
// (before phones were normalised) becomes the phone's user, its row
// rewritten; the oldest of several; never one where the phone has a user
// already, which is left as it is.
func (s suite) testEnsureUserLegacy(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	ensure := func(phone string, legacy ...string) (*seckill.User, bool) {
		t.Helper()
		u, created, err := st.EnsureUser(ctx, phone, legacy...)
		if err != nil {
			t.Fatalf("EnsureUser(%q, %q): %v", phone, legacy, err)
		}
		return u, created
	}
	phoneOf := func(id int64) string {
		t.Helper()
		u, err := st.User(ctx, id)
		if err != nil {
			t.Fatalf("User(%d): %v", id, err)
		}
		return u.Phone
	}

	old, _ := ensure("13800138000")
	u, created := ensure("+8613800138000", "008613800138000", "13800138000", "013800138000")
	if created || u.ID != old.ID || u.Phone != "+8613800138000" || !u.CreatedAt.Equal(old.CreatedAt) {
		t.Errorf("EnsureUser with a legacy user = %+v, created %v; want user %d as +8613800138000, created %v", u, created, old.ID, old.CreatedAt)
	}
	if p := phoneOf(old.ID); p != "+8613800138000" {
		t.Errorf("the legacy user's stored phone is %q, want it rewritten to +8613800138000", p)
	}
	if again, created := ensure("+8613800138000"); created || again.ID != old.ID {
		t.Errorf("EnsureUser after the rewrite = user %d, created %v; want %d", again.ID, created, old.ID)
	}

	// Several legacy users: the oldest is the phone's, the other stays.
	first, _ := ensure("13900139000")
	second, _ := ensure("008613900139000")
	if u, _ := ensure("+8613900139000", "008613900139000", "13900139000"); u.ID != first.ID {
		t.Errorf("of legacy users %d and %d, user %d became the phone's; want the oldest", first.ID, second.ID, u.ID)
	}
	if p := phoneOf(second.ID); p != "008613900139000" {
		t.Errorf("the other legacy user's phone became %q; want it left", p)
	}

	// Both forms have a user: neither is merged, the phone's is returned.
	legacy, _ := ensure("13700137000")
	current, _ := ensure("+8613700137000")
	if u, created := ensure("+8613700137000", "13700137000"); created || u.ID != current.ID {
		t.Errorf("with both forms stored, EnsureUser = user %d, created %v; want %d", u.ID, created, current.ID)
	}
	if p := phoneOf(legacy.ID); p != "13700137000" {
		t.Errorf("the legacy user's phone became %q; want it left", p)
	}

	// Legacy forms nobody has: a new user.
	if u, created := ensure("+8613600136000", "13600136000"); !created || u.Phone != "+8613600136000" {
		t.Errorf("EnsureUser with unused legacy forms = %+v, created %v; want a new user", u, created)
	}
}

// testEnsureUserLegacyConcurrent: concurrent first logins of a legacy
// user all get it, and none creates a user.
func (s suite) testEnsureUserLegacyConcurrent(t *testing.T) {
	st := s.store(t)
	old, _, err := st.EnsureUser(t.Context(), "13500135000")
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	type result struct {
		u       *seckill.User
		created bool
		err     error
	}
	results := make([]result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			<-start
			u, created, err := st.EnsureUser(t.Context(), "+8613500135000", "008613500135000", "13500135000", "013500135000")
			results[i] = result{u, created, err}
		})
	}
	close(start)
	wg.Wait()
	for i, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("EnsureUser call %d: %v", i, r.err)
		case r.u.ID != old.ID || r.created:
			t.Errorf("EnsureUser call %d = user %d, created %v; want the legacy user %d", i, r.u.ID, r.created, old.ID)
		}
	}
}

func (s suite) testUserNotFound(t *testing.T) {
	st := s.store(t)
	u, _, err := st.EnsureUser(t.Context(), "13600000000")
	if err != nil {
		t.Fatalf("EnsureUser: %v", err)
	}
	for _, id := range []int64{u.ID + 1, 0, -1} {
		got, err := st.User(t.Context(), id)
		if !errors.Is(err, seckill.ErrUserNotFound) {
			t.Errorf("User(%d) = %+v, %v; want ErrUserNotFound", id, got, err)
		}
	}
}

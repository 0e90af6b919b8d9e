package http

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestControlRoutes: the operator's control routes, on the fakes: admins
// only, the voucher's id in the path, the answer the voucher as it is, and
// an addition of stock that needs its Idempotency-Key and a body of one
// field; every answer as the OpenAPI document says.
func TestControlRoutes(t *testing.T) {
	t.Parallel()
	e := newDataEnv(t)
	id := strconv.FormatInt(bigID, 10)
	base := "/api/admin/vouchers/" + id
	stock := func(key, body string) response {
		t.Helper()
		return e.send("POST", base+"/stock", map[string]string{"Authorization": "Bearer " + e.admin, "Idempotency-Key": key}, body)
	}

	for _, verb := range []string{"pause", "resume", "end", "stock"} {
		e.wantError(e.do("POST", base+"/"+verb, e.buyer, nil), 403, "forbidden")
		e.wantError(e.do("POST", base+"/"+verb, "", nil), 401, "unauthorized")
		e.wantError(e.do("POST", "/api/admin/vouchers/x/"+verb, e.admin, nil), 400, "invalid_argument")
	}
	e.wantError(e.do("POST", "/api/admin/vouchers/77/pause", e.admin, nil), 404, "voucher_not_found")

	if res := e.do("POST", base+"/pause", e.admin, nil); res.status != 200 || res.body["paused"] != true || res.body["id"] != id {
		t.Errorf("pause = %d %s", res.status, res.raw)
	}
	if res := e.do("POST", base+"/resume", e.admin, nil); res.status != 200 || res.body["paused"] != false {
		t.Errorf("resume = %d %s", res.status, res.raw)
	}
	if res := e.do("POST", base+"/end", e.admin, nil); res.status != 200 || res.body["endTime"] != fakeNow.UTC().Format("2006-01-02T15:04:05Z07:00") {
		t.Errorf("end = %d %s", res.status, res.raw)
	}

	e.wantError(stock("", `{"add":5}`), 400, "invalid_argument")
	e.wantError(stock(strings.Repeat("k", 101), `{"add":5}`), 400, "invalid_argument")
	e.wantError(stock("k", `{}`), 400, "invalid_argument")
	e.wantError(stock("k", `{"add":5,"more":1}`), 400, "invalid_argument")
	for range 2 {
		if res := stock("k", `{"add":5}`); res.status != 200 || res.body["stock"] != 105.0 || res.body["remaining"] != 105.0 {
			t.Errorf("add 5 with key k = %d %s, want stock and remaining 105", res.status, res.raw)
		}
	}
	want := []string{"Pause " + id + " true", "Pause " + id + " false", "End " + id, "AddStock " + id + " k 5", "AddStock " + id + " k 5"}
	got := e.vouchers.all()
	got = got[len(got)-len(want):]
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

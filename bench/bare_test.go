package bench

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBareHandler: the bare handler takes the sale's request, reads its
// body, and answers the sold-out answer's status, type and bytes.
func TestBareHandler(t *testing.T) {
	t.Parallel()
	body := soldOutBody(12345)
	if want := `{"code":"sold_out","message":"voucher 12345 is sold out"}` + "\n"; string(body) != want {
		t.Fatalf("soldOutBody = %q, want %q", body, want)
	}
	b, err := startBare(body, ServerTimeouts{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	req, _ := http.NewRequest("POST", b.url+"/api/vouchers/12345/seckill", strings.NewReader(`{"ignored":true}`))
	req.Header.Set("Authorization", "Bearer x")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	got, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusConflict || string(got) != string(body) || res.Header.Get("Content-Type") != soldOutType ||
		res.ContentLength != int64(len(body)) {
		t.Errorf("answer %d %q (%s, length %d); want 409 %q (%s)", res.StatusCode, got, res.Header.Get("Content-Type"), res.ContentLength, body, soldOutType)
	}
	if b.srv.ReadHeaderTimeout != 5*time.Second || b.srv.IdleTimeout != time.Minute || b.srv.MaxHeaderBytes != 16<<10 {
		t.Errorf("bare server limits %v, %v, %d; want serve's defaults", b.srv.ReadHeaderTimeout, b.srv.IdleTimeout, b.srv.MaxHeaderBytes)
	}
}

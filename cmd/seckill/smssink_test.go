package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSMSSinkLogin: serve posts a login code to a running sms-sink, which
// checks its signature and prints it, and logging in with it works; a post
// that is not signed with the secret is refused.
func TestSMSSinkLogin(t *testing.T) {
	const secret = "sms-sink-secret-0123456789abcdef-0123"
	sink := start(t, environ{"SECKILL_LOGIN_WEBHOOK_SECRET": secret}, "sms-sink", "--login-webhook-url", "http://127.0.0.1:0/sms")
	sinkURL := sink.stderr.wait(t, `listening on (http://[^;\s]+);`)[1]
	if !strings.HasSuffix(sinkURL, "/sms") {
		t.Fatalf("the sink listens at %s, not on the path asked", sinkURL)
	}
	// serve takes the sink's URL and secret by the same variables.
	serve := start(t, environ{"SECKILL_LOGIN_WEBHOOK_URL": sinkURL, "SECKILL_LOGIN_WEBHOOK_SECRET": secret},
		"serve", "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data"))
	base := serve.stdout.wait(t, `Listening on (http://\S+)`)[1]

	sent := time.Now()
	if status, res := call(t, "POST", base+"/api/auth/code", "", `{"phone":"+8613800138000"}`); status != 200 {
		t.Fatalf("POST /api/auth/code = %d %v", status, res)
	}
	m := sink.stdout.wait(t, `phone=(\S+) code=(\d+) expires=(\S+)\n`)
	phone, code := m[1], m[2]
	if phone != "+8613800138000" || len(code) != 8 {
		t.Errorf("the sink printed phone %q, code %q", phone, code)
	}
	if exp, err := time.Parse(time.RFC3339, m[3]); err != nil || exp.Before(sent.Add(4*time.Minute)) || exp.After(time.Now().Add(5*time.Minute+time.Second)) {
		t.Errorf("expires %q (%v): want about 5 minutes from the send", m[3], err)
	}
	status, res := call(t, "POST", base+"/api/auth/login", "", `{"phone":"`+phone+`","code":"`+code+`"}`)
	token, _ := res["token"].(string)
	if status != 200 || token == "" {
		t.Fatalf("login with the printed code = %d %v", status, res)
	}
	if status, res := call(t, "GET", base+"/api/orders", token, ""); status != 200 {
		t.Errorf("GET /api/orders with the login's token = %d %v", status, res)
	}

	// Unsigned: refused, said so on stderr, nothing printed.
	res2, err := http.Post(sinkURL, "application/json", strings.NewReader(`{"phone":"+8613800138001","code":"12345678"}`))
	if err != nil {
		t.Fatal(err)
	}
	res2.Body.Close()
	if res2.StatusCode != http.StatusUnauthorized {
		t.Errorf("an unsigned post = %d, want 401", res2.StatusCode)
	}
	sink.stderr.wait(t, `refused a post from \S+: no X-Seckill-Timestamp`)
	if strings.Contains(sink.stdout.String(), "+8613800138001") {
		t.Errorf("the sink printed an unsigned code:\n%s", sink.stdout.String())
	}
	if code := sink.stop(t); code != 0 {
		t.Errorf("sms-sink stopped with exit %d", code)
	}
}

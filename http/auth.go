package http

import (
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/ratelimit"
)

// loginOffRetryAfter is the Retry-After of a server without login: it
// takes an operator and a restart to change, not seconds.
const loginOffRetryAfter = 5 * time.Minute

// loginHandler is a login route's handler; client is the client's address
// as the limits read it (IPv6 by /64), empty when there is none.
type loginHandler func(w http.ResponseWriter, r *http.Request, client string)

func (s *Server) sendCode(w http.ResponseWriter, r *http.Request, _ string) {
	if s.login == nil {
		loginOff(w)
		return
	}
	var req struct {
		Phone string `json:"phone"`
	}
	if err := decodeJSON(r.Body, &req); err != nil {
		s.error(w, r, err)
		return
	}
	if err := s.login.SendCode(r.Context(), req.Phone); err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Sent     bool   `json:"sent"`
		Delivery string `json:"delivery"`
	}{Sent: true, Delivery: codeDelivery(s.login.Sender)})
}

// codeDelivery says where a login code goes, for the sale page to tell the
// buyer where to look: "log" on the embedded default, whose codes are
// written to the server's log, "phone" through any other sender.
func codeDelivery(sender seckill.CodeSender) string {
	if _, ok := sender.(auth.LogSender); ok {
		return "log"
	}
	return "phone"
}

func (s *Server) logIn(w http.ResponseWriter, r *http.Request, client string) {
	if s.login == nil {
		loginOff(w)
		return
	}
	var req struct {
		Phone string `json:"phone"`
		Code  string `json:"code"`
	}
	if err := decodeJSON(r.Body, &req); err != nil {
		s.error(w, r, err)
		return
	}
	token, u, err := s.login.LogIn(r.Context(), client, req.Phone, req.Code)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Token  string `json:"token"`
		UserID string `json:"userId"`
	}{Token: token, UserID: strconv.FormatInt(u.ID, 10)})
}

// loginOff answers a login route of a server without login. It is not
// logged: serve said so at start, and a line per request would say nothing
// new.
func loginOff(w http.ResponseWriter) {
	writeError(w, &seckill.Error{
		Kind:       seckill.ErrUnavailable,
		Message:    "login is not configured on this server",
		RetryAfter: loginOffRetryAfter,
	})
}

// loginLimits are a login route's limits: a token bucket per client
// address and one shared by all clients, which bounds the codes sent (and
// the SMS bill) however many addresses ask. Either is nil when off.
type loginLimits struct {
	addrs  *ratelimit.Limiter[netip.Addr]
	global *ratelimit.Limiter[struct{}]
	// client reads the client's address as the buy route does.
	client *rateLimits
	now    func() time.Time
}

// newLoginLimits returns the login limits of cfg, on the clock now.
func newLoginLimits(cfg Config, now func() time.Time) *loginLimits {
	return &loginLimits{
		addrs: ratelimit.New(ratelimit.Config{Rate: cfg.LoginRateAddr, Burst: cfg.LoginRateAddrBurst, Now: now},
			func(a netip.Addr) uint64 { return ratelimit.HashBytes16(a.As16()) }),
		global: ratelimit.New(ratelimit.Config{Rate: cfg.LoginRateGlobal, Burst: cfg.LoginRateGlobalBurst, MaxKeys: 1, Now: now},
			func(struct{}) uint64 { return 0 }),
		client: &rateLimits{proxies: trustedProxies(cfg)},
		now:    now,
	}
}

// limitLogin limits a login route's requests per client address and in
// all, on buckets of its own, before they cost Redis, the database or an
// SMS anything. Over a limit the answer is 429 rate_limited with
// Retry-After.
func (s *Server) limitLogin(next loginHandler) http.HandlerFunc {
	return s.limitLoginWith(newLoginLimits(s.cfg, time.Now), next)
}

// limitLoginWith is limitLogin with limits of the caller's, for tests that
// set the clock.
func (s *Server) limitLoginWith(l *loginLimits, next loginHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		addr, hasAddr := l.client.clientAddr(r)
		if hasAddr {
			addr = addrKey(addr)
		}
		if err := l.allow(addr, hasAddr, l.now()); err != nil {
			s.error(w, r, err)
			return
		}
		client := ""
		if hasAddr {
			client = addr.String()
		}
		next(w, r, client)
	}
}

// allow takes a token, at now, from the bucket of the address (if the
// client has one), then from the global one. The address comes first so
// that one client over its own limit does not drain everyone's; a client
// refused for the global bucket's sake gets its token back.
func (l *loginLimits) allow(addr netip.Addr, hasAddr bool, now time.Time) error {
	if hasAddr {
		if ok, wait := l.addrs.AllowAt(addr, now); !ok {
			return refusal("too many login requests from this address", wait)
		}
	}
	if ok, wait := l.global.AllowAt(struct{}{}, now); !ok {
		if hasAddr {
			l.addrs.Refund(addr)
		}
		return refusal("too many login requests to this server", wait)
	}
	return nil
}

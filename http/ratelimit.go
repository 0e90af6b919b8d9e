package http

import (
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/ratelimit"
)

// rateLimits are a route's limits: a token bucket per buyer and one per
// client address. Either is nil when off.
type rateLimits struct {
	users   *ratelimit.Limiter[int64]
	addrs   *ratelimit.Limiter[netip.Addr]
	proxies []netip.Prefix
	now     func() time.Time
	// what names the requests limited, in the refusals ("buy requests").
	what string
}

// newRateLimits returns the buy route's limits of cfg, on the clock now.
func newRateLimits(cfg Config, now func() time.Time) *rateLimits {
	return newLimits(cfg, "buy requests", cfg.RateUser, cfg.RateUserBurst, cfg.RateAddr, cfg.RateAddrBurst, now)
}

// newOrderReadLimits returns the order reads' limits of cfg, on the clock
// now.
func newOrderReadLimits(cfg Config, now func() time.Time) *rateLimits {
	return newLimits(cfg, "order reads", cfg.OrderRateUser, cfg.OrderRateUserBurst, cfg.OrderRateAddr, cfg.OrderRateAddrBurst, now)
}

// newChallengeLimits returns the challenge route's limits of cfg, on the
// clock now: per buyer only.
func newChallengeLimits(cfg Config, now func() time.Time) *rateLimits {
	return newLimits(cfg, "challenge requests", cfg.ChallengeRateUser, cfg.ChallengeRateUserBurst, 0, 0, now)
}

func newLimits(cfg Config, what string, user float64, userBurst int, addr float64, addrBurst int, now func() time.Time) *rateLimits {
	return &rateLimits{
		users: ratelimit.New(ratelimit.Config{Rate: user, Burst: userBurst, Now: now}, ratelimit.HashInt64),
		addrs: ratelimit.New(ratelimit.Config{Rate: addr, Burst: addrBurst, Now: now},
			func(a netip.Addr) uint64 { return ratelimit.HashBytes16(a.As16()) }),
		proxies: trustedProxies(cfg),
		now:     now,
		what:    what,
	}
}

// trustedProxies returns cfg's trusted proxies as clientAddr compares them.
func trustedProxies(cfg Config) []netip.Prefix {
	proxies := make([]netip.Prefix, 0, len(cfg.TrustedProxies))
	for _, p := range cfg.TrustedProxies {
		// An IPv4 proxy written as ::ffff:a.b.c.d must match the unmapped
		// addresses it is compared with.
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		proxies = append(proxies, p.Masked())
	}
	return proxies
}

// limitRate limits buy requests per buyer and per client address, before
// they cost Redis or the database anything. Over a limit the answer is 429
// rate_limited with Retry-After.
func (s *Server) limitRate(next userHandler) userHandler {
	return s.limitRateWith(newRateLimits(s.cfg, time.Now), next)
}

// limitRateWith is limitRate with limits of the caller's, for tests that
// set the clock.
func (s *Server) limitRateWith(l *rateLimits, next userHandler) userHandler {
	if l.users == nil && l.addrs == nil {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request, who auth.Identity) {
		start := l.now()
		if err := l.allow(r, who.UserID, start); err != nil {
			s.admissions.record("rate_limited", l.now().Sub(start))
			s.error(w, r, err)
			return
		}
		next(w, r, who)
	}
}

// limitOrderReads limits the order reads (both routes on the same
// buckets) per buyer and per client address, on buckets apart from the
// buy route's, so that a buyer polling their order spends none of their
// buys. Each read costs a database read and a Redis read per open voucher
// (OrderService.Orders looks for the buyer's pending orders in each): the
// limit bounds what one token, or one address, can make Redis and the
// database do. Over a limit the answer is 429 rate_limited with
// Retry-After.
func (s *Server) limitOrderReads() func(userHandler) userHandler {
	l := newOrderReadLimits(s.cfg, time.Now)
	return func(next userHandler) userHandler { return s.limited(l, next) }
}

// limitChallenges limits the requests for challenges per buyer, on
// buckets apart from the buy route's: each costs random numbers and an
// HMAC, and once the voucher sold out a read of its stock. Over the limit
// the answer is 429 rate_limited with Retry-After. (However often a buyer
// asks, they count once a second toward the voucher's difficulty:
// seckill.Difficulty.)
func (s *Server) limitChallenges(next userHandler) userHandler {
	return s.limited(newChallengeLimits(s.cfg, time.Now), next)
}

// limited answers requests over l 429 rate_limited, and passes the others
// to next.
func (s *Server) limited(l *rateLimits, next userHandler) userHandler {
	if l.users == nil && l.addrs == nil {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request, who auth.Identity) {
		if err := l.allow(r, who.UserID, l.now()); err != nil {
			s.error(w, r, err)
			return
		}
		next(w, r, who)
	}
}

// allow takes a token, at now, from the bucket of the buyer user, then
// from the address's. The buyer comes first so that one buyer over their own limit
// does not drain the budget of the neighbours behind the same NAT; a buyer
// refused for the address's sake gets their token back.
func (l *rateLimits) allow(r *http.Request, user int64, now time.Time) error {
	if ok, wait := l.users.AllowAt(user, now); !ok {
		return refusal("too many "+l.what+" from this buyer", wait)
	}
	if l.addrs == nil {
		return nil
	}
	addr, ok := l.clientAddr(r)
	if !ok {
		// Not an IP connection (a Unix socket behind a local proxy): there
		// is no address to count against.
		return nil
	}
	if ok, wait := l.addrs.AllowAt(addrKey(addr), now); !ok {
		l.users.Refund(user)
		return refusal("too many "+l.what+" from this address", wait)
	}
	return nil
}

// refusal is the rate_limited error, with Retry-After in whole seconds (the
// error table rounds up) and at least one.
func refusal(msg string, wait time.Duration) error {
	err := seckill.Errorf(seckill.ErrRateLimited, "%s: try again in a moment", msg)
	err.RetryAfter = max(wait, time.Second)
	return err
}

// clientAddr returns the client's address: the connection's, unless the
// connection comes from a trusted proxy; then the right-most address of
// X-Forwarded-For that is not a trusted proxy. Only the entries right of it
// were written by proxies we trust: anything further left the client may
// have made up. Without trusted proxies the header is ignored, since any
// client can send one.
func (l *rateLimits) clientAddr(r *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	peer := ap.Addr().Unmap().WithZone("")
	if !l.trusted(peer) {
		return peer, true
	}
	values := r.Header.Values("X-Forwarded-For")
	client := peer
	// Each proxy appends the address it received from to the last header
	// line (or adds a line), so the nearest hop is the last entry of the
	// last line.
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for {
			var entry string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				v, entry = v[:j], v[j+1:]
			} else {
				v, entry = "", v
			}
			a, ok := parseForwarded(strings.TrimSpace(entry))
			if !ok {
				// A header we cannot read names no one: count the
				// connection, not a guess.
				return peer, true
			}
			if !l.trusted(a) {
				return a, true
			}
			// Every hop so far is a proxy of ours: the left-most of them
			// is the origin if nothing else is found.
			client = a
			if v == "" {
				break
			}
		}
	}
	return client, true
}

// parseForwarded reads one X-Forwarded-For entry: an address, or (as some
// proxies write it) an address and port.
func parseForwarded(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

func (l *rateLimits) trusted(a netip.Addr) bool {
	for _, p := range l.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// addrKey is the bucket of an address: an IPv4 address is its own, an IPv6
// address shares its /64. A single IPv6 host is routinely given a whole /64
// and can pick any address in it, so per-address buckets would be no limit.
func addrKey(a netip.Addr) netip.Addr {
	if a.Is4() {
		return a
	}
	p, _ := a.Prefix(64)
	return p.Addr()
}

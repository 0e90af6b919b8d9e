// Package http serves seckill's JSON API (docs/api.md), its health
// checks and its Prometheus metrics.
package http

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/auth"
)

// Config holds the server's settings. Zero fields take the defaults named
// in their comments.
type Config struct {
	// Addr is the TCP address to listen on. Default ":8080".
	Addr string
	// MaxBodyBytes caps a request body. Default 64 KiB.
	MaxBodyBytes int64
	// MaxHeaderBytes caps a request's headers. Default 16 KiB.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds reading a request's headers, so a client
	// that trickles them cannot hold a connection. Default 5s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request. Default 10s.
	ReadTimeout time.Duration
	// WriteTimeout bounds handling a request and writing its answer.
	// Default 15s.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Default 60s.
	IdleTimeout time.Duration
	// RequestTimeout bounds the work of one request: calls to Redis and the
	// database give up when it passes. Default 5s.
	RequestTimeout time.Duration
	// ReadyTimeout bounds each dependency check of /readyz. Default 2s.
	ReadyTimeout time.Duration
	// RateUser is how many buy requests a second a buyer may make, with
	// bursts of RateUserBurst; zero turns the limit off.
	RateUser      float64
	RateUserBurst int
	// RateAddr and RateAddrBurst limit buy requests per client address;
	// zero (the default) is off: many buyers share an address behind
	// mobile NAT.
	RateAddr      float64
	RateAddrBurst int
	// OrderRateUser and OrderRateUserBurst limit the order reads (GET
	// /api/orders and /api/orders/{id}) of each buyer; OrderRateAddr and
	// OrderRateAddrBurst, those of each client address. Each on buckets
	// of its own, apart from the buy route's. Zero is off.
	OrderRateUser      float64
	OrderRateUserBurst int
	OrderRateAddr      float64
	OrderRateAddrBurst int
	// ChallengeRateUser and ChallengeRateUserBurst limit each buyer's
	// requests for challenges (GET /api/vouchers/{id}/challenge), on
	// buckets of their own. Zero is off.
	ChallengeRateUser      float64
	ChallengeRateUserBurst int
	// LoginRateAddr and LoginRateAddrBurst limit each login route's
	// requests per client address; LoginRateGlobal and
	// LoginRateGlobalBurst, those of all clients together. Zero is off.
	LoginRateAddr        float64
	LoginRateAddrBurst   int
	LoginRateGlobal      float64
	LoginRateGlobalBurst int
	// TrustedProxies are the proxies whose X-Forwarded-For names the
	// client's address; without them the connection's address is used.
	TrustedProxies []netip.Prefix
	// MetricsAddr, if set, is a TCP address of its own for /metrics (a
	// private interface, or a port the load balancer does not forward):
	// Start listens there too, and Addr no longer serves /metrics.
	// Default "": /metrics is served on Addr, as it always was.
	MetricsAddr string
	// MetricsToken, if set, is a secret /metrics requires as a bearer
	// token (Authorization: Bearer <token>), wherever it is served.
	// Default "": none.
	MetricsToken string
}

func (c Config) withDefaults() Config {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Addr == "" {
		c.Addr = ":8080"
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 64 << 10
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = 16 << 10
	}
	def(&c.ReadHeaderTimeout, 5*time.Second)
	def(&c.ReadTimeout, 10*time.Second)
	def(&c.WriteTimeout, 15*time.Second)
	def(&c.IdleTimeout, 60*time.Second)
	def(&c.RequestTimeout, 5*time.Second)
	def(&c.ReadyTimeout, 2*time.Second)
	return c
}

// Check is a dependency that /readyz asks: nil when it answers.
type Check func(ctx context.Context) error

// Services are what the server's handlers call: the small interfaces
// declared beside the handlers that call them, which the root package's
// services satisfy and tests fake.
type Services struct {
	Vouchers VoucherService
	Orders   OrderService
	// Login is the phone-code login; nil turns it off, and both login
	// routes answer 503.
	Login  *auth.Login
	Tokens *auth.Tokens
	// Checks are the dependencies /readyz reports, by name.
	Checks map[string]Check
	// Details describe, by the same names, dependencies that answer: what
	// they are ("cluster: 3 masters, 3 replicas"), for /readyz.
	Details map[string]Detail
	// DeadLetters, Stats and Reconciler serve the admin API and page; a
	// nil one (a nil interface, not a nil pointer in one) turns its routes
	// off: they answer 503.
	DeadLetters DeadLetterAdmin
	Stats       StatsSource
	Reconciler  Reconciler
	// Refunds lists the refunds of late payments waiting for the provider
	// on the admin API and page; nil: its route answers 503.
	Refunds RefundAdmin
	// RefusedPayments lists the payment events refused for their amount or
	// currency on the admin API and page; nil: its route answers 503.
	RefusedPayments RefusedPaymentAdmin
	// Payments serves the pay and cancel routes and the payment webhook,
	// Webhook checks the webhook's signatures; a nil one turns its routes
	// off: they answer 503.
	Payments PaymentService
	Webhook  PaymentWebhook
	// Challenges issues the vouchers' challenges and checks the buys'
	// solutions; nil: no voucher takes one, the challenge route answers
	// 409 challenge_not_needed and buys are checked by nothing more.
	Challenges ChallengeService
}

// Server is the HTTP server.
type Server struct {
	cfg        Config
	vouchers   VoucherService
	orders     OrderService
	payments   PaymentService
	webhook    PaymentWebhook
	challenges ChallengeService
	ops        adminServices
	login      *auth.Login
	tokens     *auth.Tokens
	checks     map[string]Check
	details    map[string]Detail
	logger     *slog.Logger
	metrics    *metrics
	admissions *admissions
	sampler    *logSampler
	handler    http.Handler
	// routes are the routes the server serves, as registered.
	routes []route

	srv *http.Server
	ln  net.Listener
	// metricsHandler serves /metrics alone on Config.MetricsAddr, with
	// metricsSrv and metricsLn once started; nil without it.
	metricsHandler http.Handler
	metricsSrv     *http.Server
	metricsLn      net.Listener
}

// New returns a server of the services. It registers its metrics on reg and
// serves reg's metrics at /metrics.
func New(cfg Config, svc Services, reg *prometheus.Registry, logger *slog.Logger) (*Server, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	admissions, err := newAdmissions(reg)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:        cfg.withDefaults(),
		vouchers:   svc.Vouchers,
		orders:     svc.Orders,
		payments:   svc.Payments,
		webhook:    svc.Webhook,
		challenges: svc.Challenges,
		ops: adminServices{deadLetters: svc.DeadLetters, stats: svc.Stats, reconciler: svc.Reconciler, refunds: svc.Refunds,
			refused: svc.RefusedPayments},
		login:      svc.Login,
		tokens:     svc.Tokens,
		checks:     svc.Checks,
		details:    svc.Details,
		logger:     logger,
		metrics:    m,
		sampler:    newLogSampler(10),
		admissions: admissions,
	}
	if svc.Challenges != nil {
		if err := registerChallengeMetrics(reg, svc.Challenges); err != nil {
			return nil, err
		}
	}
	s.routes = s.routeTable(reg)
	mux := http.NewServeMux()
	for _, rt := range s.routes {
		mux.Handle(rt.pattern, rt.handler)
		m.addRoute(rt.pattern)
	}
	m.addRoute(unmatched)
	s.handler = s.limit(s.instrument(s.recover(mux)))
	if s.cfg.MetricsAddr != "" {
		metrics := http.NewServeMux()
		metrics.Handle(metricsPattern, s.metricsRoute(reg))
		m.addRoute(metricsPattern)
		s.metricsHandler = s.limit(s.instrument(s.recover(metrics)))
	}
	return s, nil
}

// route is a pattern of the mux and its handler.
type route struct {
	pattern string
	handler http.Handler
}

// routeTable returns every route the server serves; the OpenAPI document
// (openapi.json) describes each of them, and a test holds the two equal.
func (s *Server) routeTable(reg *prometheus.Registry) []route {
	reads := s.limitOrderReads()
	sale := loadSalePage()
	routes := []route{
		{"POST /api/auth/code", s.limitLogin(s.sendCode)},
		{"POST /api/auth/login", s.limitLogin(s.logIn)},
		{"POST /api/admin/vouchers", s.admin(s.createVoucher)},
		{"GET /api/vouchers", http.HandlerFunc(s.listVouchers)},
		{"GET /api/vouchers/{id}", http.HandlerFunc(s.getVoucher)},
		{"POST /api/vouchers/{id}/seckill", s.user(s.limitRate(s.seckill))},
		{"GET /api/vouchers/{id}/challenge", s.user(s.limitChallenges(s.getChallenge))},
		{"GET /api/orders/{id}", s.user(reads(s.getOrder))},
		{"GET /api/orders", s.user(reads(s.listOrders))},
		{"POST /api/orders/{id}/pay", s.user(reads(s.payOrder))},
		{"POST /api/orders/{id}/cancel", s.user(reads(s.cancelOrder))},
		{"POST /api/payments/webhook", http.HandlerFunc(s.paymentWebhook)},
		{"GET /api/admin/stats", s.admin(s.adminStats)},
		{"GET /api/admin/dlq", s.admin(s.adminDeadLetters)},
		{"POST /api/admin/dlq/{id}/retry", s.admin(s.adminRetryDeadLetter)},
		{"POST /api/admin/dlq/{id}/discard", s.admin(s.adminDiscardDeadLetter)},
		{"GET /api/admin/refunds", s.admin(s.adminRefunds)},
		{"GET /api/admin/payments/refused", s.admin(s.adminRefusedPayments)},
		{"POST /api/admin/vouchers/{id}/reconcile", s.admin(s.adminReconcile)},
		{"POST /api/admin/vouchers/{id}/pause", s.admin(s.pauseVoucher(true))},
		{"POST /api/admin/vouchers/{id}/resume", s.admin(s.pauseVoucher(false))},
		{"POST /api/admin/vouchers/{id}/end", s.admin(s.endVoucher)},
		{"POST /api/admin/vouchers/{id}/stock", s.admin(s.addStock)},
		{"GET /api/openapi.json", http.HandlerFunc(serveOpenAPI)},
		{"GET /admin/", s.adminPage()},
		{"GET /admin", http.RedirectHandler("/admin/", http.StatusMovedPermanently)},
		{"GET /{$}", s.salePageHandler(sale)},
		{"GET " + saleAssetPrefix, s.saleAssets(sale)},
		{"GET /api/time", serverTime(time.Now)},
		{"GET /healthz", http.HandlerFunc(s.healthz)},
		{"GET /readyz", http.HandlerFunc(s.readyz)},
	}
	if s.cfg.MetricsAddr == "" {
		routes = append(routes, route{metricsPattern, s.metricsRoute(reg)})
	}
	return routes
}

// Handler returns the server's handler, for tests and for embedding.
func (s *Server) Handler() http.Handler { return s.handler }

// MetricsHandler returns the handler of Config.MetricsAddr, which serves
// /metrics alone; nil without it (Handler serves /metrics).
func (s *Server) MetricsHandler() http.Handler { return s.metricsHandler }

// Start listens on the configured address, and on the metrics address if
// one is set, and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("http: listen on %s: %w", s.cfg.Addr, err)
	}
	if s.metricsHandler != nil {
		mln, err := net.Listen("tcp", s.cfg.MetricsAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("http: listen on %s for /metrics: %w", s.cfg.MetricsAddr, err)
		}
		s.metricsLn, s.metricsSrv = mln, s.newHTTPServer(s.metricsHandler)
		go s.serve(s.metricsSrv, mln)
	}
	s.ln, s.srv = ln, s.newHTTPServer(s.handler)
	go s.serve(s.srv, ln)
	return nil
}

func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
}

func (s *Server) serve(srv *http.Server, ln net.Listener) {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.logger.Error("http server stopped", "addr", ln.Addr().String(), "err", err)
	}
}

// Addr returns the address the server listens on, once started.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// MetricsAddr returns the address /metrics is served on alone, once
// started; nil without Config.MetricsAddr.
func (s *Server) MetricsAddr() net.Addr {
	if s.metricsLn == nil {
		return nil
	}
	return s.metricsLn.Addr()
}

// Shutdown stops accepting connections and waits, until ctx ends, for the
// requests in flight to finish.
func (s *Server) Shutdown(ctx context.Context) error {
	var errs []error
	for _, srv := range []*http.Server{s.srv, s.metricsSrv} {
		if srv == nil {
			continue
		}
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http: shutdown: %w", err))
		}
	}
	return errors.Join(errs...)
}

// error answers with err, through the one error table. Only 5xx answers
// are logged, but for those the service marks expected
// (seckill.Error.Expected): the others are ours to fix.
func (s *Server) error(w http.ResponseWriter, r *http.Request, err error) {
	s.errorCode(w, r, err, lookupError(err))
}

// errorCode is error with err's entry of the table, e, looked up already.
func (s *Server) errorCode(w http.ResponseWriter, r *http.Request, err error, e *errorCode) {
	if e == internalError && errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The client closed the request: nobody reads the answer, and it
		// is not the service's failure (it was a 500 logged as one, from
		// every buy in flight when a load test stopped).
		e = clientClosed
	}
	if status := writeErrorCode(w, err, e); status >= 500 && !expected(err) {
		s.sampler.log(s.logger, r.Pattern+" "+strconv.Itoa(status), "request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
}

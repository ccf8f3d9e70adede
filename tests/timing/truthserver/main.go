// The timing reference server: an OpenAI-compatible streaming server whose timing is known.
//
// Every request is answered on a schedule set by its configuration (a TTFT and an inter-chunk
// gap, fixed or drawn from a seeded distribution), and the server records when each request
// arrived and when each chunk's bytes were written and flushed to the connection: the truth a
// load client's figures are compared against. Written in Go (standard library only) so that
// the server itself costs almost no CPU beside the client it measures.
//
//	POST /v1/chat/completions, POST /v1/completions   streamed or not
//	GET  /v1/models
//	GET  /_config, POST /_config                      the schedule (JSON, fields of Config)
//	GET  /_truth                                      {"config", "records": [...]} of every request
//	POST /_truth/reset                                forget the records
//
// It prints "listening HOST:PORT" on stdout once it accepts connections.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Config is the schedule of every answer.
type Config struct {
	Model          string  `json:"model"`
	TTFTms         float64 `json:"ttft_ms"`          // arrival to the first content chunk
	ITLms          float64 `json:"itl_ms"`           // between content chunks
	Distribution   string  `json:"distribution"`     // fixed | uniform | exponential
	Spread         float64 `json:"spread"`           // uniform: +-spread x the mean
	Seed           int64   `json:"seed"`             // with the request's sequence number
	Tokens         int     `json:"tokens"`           // 0: the request's max_tokens
	TokensPerChunk int     `json:"tokens_per_chunk"` // tokens in one content chunk
	RoleChunk      bool    `json:"role_chunk"`       // an empty role chunk first, as vLLM sends
	PromptTokens   int     `json:"prompt_tokens"`    // 0: one per 4 bytes of the request body
}

// Record is what the server saw and did for one request; times are nanoseconds on the machine's
// CLOCK_MONOTONIC, the clock of Python's time.perf_counter on Linux, so a client on the same
// machine can compare its own stamps with the server's request by request.
type Record struct {
	Seq            int     `json:"seq"`
	RequestID      string  `json:"request_id,omitempty"` // X-Request-Id, else the body's "user"
	Path           string  `json:"path"`
	Stream         bool    `json:"stream"`
	ArrivalNs      int64   `json:"arrival_ns"`     // the kernel's receive time of the request's bytes
	HandlerNs      int64   `json:"handler_ns"`     // when the handler began
	ArrivalSource  string  `json:"arrival_source"` // "kernel", or "handler" where none was given
	RoleNs         *int64  `json:"role_ns"`
	ChunksNs       []int64 `json:"chunks_ns"`
	EndNs          int64   `json:"end_ns"`
	Tokens         int     `json:"tokens"`
	TokensPerChunk int     `json:"tokens_per_chunk"`
	PromptTokens   int     `json:"prompt_tokens"`
	MaxLateNs      int64   `json:"max_late_ns"`
	Error          string  `json:"error,omitempty"`
}

type server struct {
	start   time.Time
	mono0   int64 // CLOCK_MONOTONIC at start
	mu      sync.Mutex
	config  Config
	seq     int
	records []Record
}

func (s *server) since(t time.Time) int64 { return s.mono0 + t.Sub(s.start).Nanoseconds() }

// timeOf is the time.Time of a CLOCK_MONOTONIC reading (the inverse of since).
func (s *server) timeOf(mono int64) time.Time { return s.start.Add(time.Duration(mono - s.mono0)) }

// stampConn is a TCP connection whose reads note the kernel's receive time (SO_TIMESTAMPNS:
// for TCP, recvmsg gives the time of the newest packet it consumed). A request's arrival is
// when its bytes reached this machine, not when a handler began: with hundreds of requests at
// once on a busy machine the handler begins milliseconds later, and a client waits that time too.
type stampConn struct {
	*net.TCPConn
	raw    syscall.RawConn
	oob    []byte
	lastRx atomic.Int64 // CLOCK_MONOTONIC ns of the latest read's newest packet; 0: none yet
}

func (c *stampConn) Read(b []byte) (int, error) {
	var n int
	var readErr error
	err := c.raw.Read(func(fd uintptr) bool {
		var oobn int
		n, oobn, _, _, readErr = syscall.Recvmsg(int(fd), b, c.oob, 0)
		if readErr == syscall.EAGAIN {
			return false
		}
		if readErr == nil && n > 0 && oobn > 0 {
			c.note(c.oob[:oobn])
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	if readErr != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("recvmsg", readErr)}
	}
	if n == 0 && len(b) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (c *stampConn) note(oob []byte) {
	messages, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range messages {
		if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SO_TIMESTAMPNS &&
			len(m.Data) >= int(unsafe.Sizeof(syscall.Timespec{})) {
			ts := *(*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
			age := time.Now().UnixNano() - ts.Nano()
			if age < 0 {
				age = 0
			}
			c.lastRx.Store(monotonic() - age)
		}
	}
}

// stampListener hands out stampConns (a connection whose socket refuses the option is served
// plainly, its requests' arrival then the handler's start).
type stampListener struct{ net.Listener }

func (l stampListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return conn, nil
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return conn, nil
	}
	var optErr error
	if err := raw.Control(func(fd uintptr) {
		optErr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil || optErr != nil {
		return conn, nil
	}
	return &stampConn{TCPConn: tcp, raw: raw, oob: make([]byte, 128)}, nil
}

type connKey struct{}

// monotonic reads CLOCK_MONOTONIC (Go's own monotonic reading is not exposed).
func monotonic() int64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func (s *server) draw(rng *rand.Rand, c Config, meanMs float64) time.Duration {
	value := meanMs
	switch c.Distribution {
	case "uniform":
		value = meanMs * (1 + c.Spread*(2*rng.Float64()-1))
	case "exponential":
		value = rng.ExpFloat64() * meanMs
	}
	return time.Duration(math.Max(0, value) * float64(time.Millisecond))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type request struct {
	Model               string         `json:"model"`
	Stream              bool           `json:"stream"`
	MaxTokens           int            `json:"max_tokens"`
	MaxCompletionTokens int            `json:"max_completion_tokens"`
	StreamOptions       map[string]any `json:"stream_options"`
	User                string         `json:"user"`
}

func (s *server) completion(w http.ResponseWriter, r *http.Request) {
	handler := time.Now()
	arrival, source := handler, "handler"
	if conn, ok := r.Context().Value(connKey{}).(*stampConn); ok {
		if at := conn.lastRx.Load(); at > 0 {
			arrival, source = s.timeOf(at), "kernel"
		}
	}
	if r.Method != http.MethodPost {
		writeJSON(w, 405, map[string]string{"error": "POST only"})
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeJSON(w, 400, map[string]any{"error": map[string]any{
			"message": "cannot read the request body: " + err.Error(), "code": 400}})
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSON(w, 400, map[string]any{"error": map[string]any{
			"message": "request body is not JSON: " + err.Error(), "code": 400}})
		return
	}
	s.mu.Lock()
	c := s.config
	s.seq++
	seq := s.seq
	s.mu.Unlock()
	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	tokens := c.Tokens
	if tokens <= 0 {
		tokens = req.MaxCompletionTokens
		if tokens <= 0 {
			tokens = req.MaxTokens
		}
		if tokens <= 0 {
			tokens = 16
		}
	}
	per := c.TokensPerChunk
	if per <= 0 {
		per = 1
	}
	prompt := c.PromptTokens
	if prompt <= 0 {
		prompt = len(body)/4 + 1
	}
	model := req.Model
	if model == "" {
		model = c.Model
	}
	var rng *rand.Rand // seeded only when a distribution needs it (seeding costs ~10 us)
	if c.Distribution != "fixed" {
		rng = rand.New(rand.NewSource(c.Seed*1_000_003 + int64(seq)))
	}
	requestID := r.Header.Get("X-Request-Id")
	if requestID == "" {
		requestID = req.User
	}
	rec := Record{Seq: seq, RequestID: requestID, Path: r.URL.Path, Stream: req.Stream, ArrivalNs: s.since(arrival),
		HandlerNs: s.since(handler), ArrivalSource: source,
		Tokens: tokens, TokensPerChunk: per, PromptTokens: prompt, ChunksNs: []int64{}}
	defer func() {
		s.mu.Lock()
		s.records = append(s.records, rec)
		s.mu.Unlock()
	}()
	id := fmt.Sprintf("cmpl-%d", seq)
	created := time.Now().Unix()
	usage := map[string]int{"prompt_tokens": prompt, "completion_tokens": tokens,
		"total_tokens": prompt + tokens}
	// the schedule: absolute send times from arrival (the kernel's), so no gap's lateness shifts the next
	chunks := (tokens + per - 1) / per
	due := make([]time.Time, chunks)
	at := arrival.Add(s.draw(rng, c, c.TTFTms))
	for k := 0; k < chunks; k++ {
		if k > 0 {
			at = at.Add(s.draw(rng, c, c.ITLms))
		}
		due[k] = at
	}
	text := func(k int) string {
		n := per
		if k == chunks-1 && tokens%per != 0 {
			n = tokens % per
		}
		return strings.Repeat(" tok", n)
	}
	if !req.Stream {
		time.Sleep(time.Until(due[chunks-1]))
		var parts []string
		for k := 0; k < chunks; k++ {
			parts = append(parts, text(k))
		}
		answer := strings.Join(parts, "")
		var choice map[string]any
		object := "text_completion"
		if chat {
			object = "chat.completion"
			choice = map[string]any{"index": 0, "finish_reason": "length",
				"message": map[string]any{"role": "assistant", "content": answer}}
		} else {
			choice = map[string]any{"index": 0, "finish_reason": "length", "text": answer}
		}
		writeJSON(w, 200, map[string]any{"id": id, "object": object, "created": created,
			"model": model, "choices": []any{choice}, "usage": usage})
		rec.EndNs = s.since(time.Now())
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeJSON(w, 500, map[string]string{"error": "no streaming"})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	send := func(b []byte) error {
		if _, err := w.Write(b); err != nil {
			return err
		}
		flusher.Flush()
		return nil
	}
	// frames from a per-request template (no encoder per chunk: a burst of requests must not
	// delay the next request's arrival), each built while its chunk waits for its time
	modelJSON, _ := json.Marshal(model)
	head := fmt.Sprintf(`data: {"id":%q,"object":%q,"created":%d,"model":%s,"choices":[{"index":0,`,
		id, object, created, modelJSON)
	contentFrame := func(content string, finish string, role bool) []byte {
		if !chat {
			return []byte(head + `"text":"` + content + `","logprobs":null,"finish_reason":` +
				finish + "}]}\n\n")
		}
		delta := `"delta":{"content":"` + content + `"}`
		if role {
			delta = `"delta":{"role":"assistant","content":"` + content + `"}`
		}
		return []byte(head + delta + `,"logprobs":null,"finish_reason":` + finish + "}]}\n\n")
	}
	chunkFrame := func(k int) []byte {
		finish := "null"
		if k == chunks-1 {
			finish = `"length"`
		}
		return contentFrame(text(k), finish, k == 0 && !c.RoleChunk)
	}
	tail := []byte{}
	if include, _ := req.StreamOptions["include_usage"].(bool); include {
		tail = []byte(fmt.Sprintf(`data: {"id":%q,"object":%q,"created":%d,"model":%s,`+
			`"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,`+
			`"total_tokens":%d}}`+"\n\n", id, object, created, modelJSON, prompt, tokens,
			prompt+tokens))
	}
	tail = append(tail, "data: [DONE]\n\n"...)
	fail := func(err error) { rec.Error = err.Error(); rec.EndNs = s.since(time.Now()) }
	if c.RoleChunk {
		if err := send(contentFrame("", "null", true)); err != nil {
			fail(err)
			return
		}
		role := s.since(time.Now())
		rec.RoleNs = &role
	}
	for k := 0; k < chunks; k++ {
		next := chunkFrame(k)
		time.Sleep(time.Until(due[k]))
		if err := send(next); err != nil {
			fail(err)
			return
		}
		now := time.Now()
		rec.ChunksNs = append(rec.ChunksNs, s.since(now))
		if late := now.Sub(due[k]).Nanoseconds(); late > rec.MaxLateNs {
			rec.MaxLateNs = late
		}
	}
	if _, err := w.Write(tail); err != nil {
		fail(err)
		return
	}
	flusher.Flush()
	rec.EndNs = s.since(time.Now())
}

func (s *server) models(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	model := s.config.Model
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": model, "object": "model", "owned_by": "truthserver", "max_model_len": 1 << 20}}})
}

func (s *server) configure(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method == http.MethodPost {
		next := s.config
		if err := json.NewDecoder(r.Body).Decode(&next); err != nil {
			writeJSON(w, 400, map[string]string{"error": err.Error()})
			return
		}
		switch next.Distribution {
		case "fixed", "uniform", "exponential":
		default:
			writeJSON(w, 400, map[string]string{"error": fmt.Sprintf(
				"distribution %q: use fixed, uniform or exponential", next.Distribution)})
			return
		}
		s.config = next
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.config)
}

func (s *server) truth(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method == http.MethodPost || strings.HasSuffix(r.URL.Path, "/reset") {
		s.records = nil
		s.seq = 0
	}
	records := s.records
	if records == nil {
		records = []Record{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"config": s.config, "records": records})
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (port 0: any free port)")
	config := flag.String("config", "", "the initial schedule, JSON (fields of Config)")
	flag.Parse()
	s := &server{start: time.Now(), mono0: monotonic(), config: Config{Model: "truth-model", TTFTms: 50, ITLms: 10,
		Distribution: "fixed", TokensPerChunk: 1, RoleChunk: true}}
	if *config != "" {
		if err := json.Unmarshal([]byte(*config), &s.config); err != nil {
			fmt.Fprintln(os.Stderr, "truthserver: -config:", err)
			os.Exit(2)
		}
	}
	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "truthserver:", err)
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.completion)
	mux.HandleFunc("/v1/completions", s.completion)
	mux.HandleFunc("/v1/models", s.models)
	mux.HandleFunc("/_config", s.configure)
	mux.HandleFunc("/_truth", s.truth)
	mux.HandleFunc("/_truth/reset", s.truth)
	fmt.Printf("listening %s\n", listener.Addr())
	_ = os.Stdout.Sync()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		}}
	if err := srv.Serve(stampListener{listener}); err != nil {
		fmt.Fprintln(os.Stderr, "truthserver:", err)
		os.Exit(1)
	}
}

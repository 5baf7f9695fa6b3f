package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Op is an event kind.
type Op string

// Event kinds.
const (
	Arrive Op = "arrive"
	Depart Op = "depart"
)

// Event is one line of a trace. An arrival requests Devices devices (0 means
// 1) of Profile, or else of MemoryMB MiB, or else of Percent percent of the
// GPU's memory, or else a whole GPU; a departure releases what the arrival
// with the same ID got (nothing, if it was rejected).
type Event struct {
	T        float64 `json:"t"`
	Op       Op      `json:"op"`
	ID       string  `json:"id"`
	Profile  string  `json:"profile,omitempty"`
	MemoryMB uint64  `json:"memoryMB,omitempty"`
	Percent  uint32  `json:"percent,omitempty"`
	Devices  int     `json:"devices,omitempty"`
}

// ErrTrace is wrapped by every [*TraceError].
var ErrTrace = errors.New("sim: malformed trace")

// TraceError reports a bad trace line.
type TraceError struct {
	Line   int // 1-based
	Reason string
}

func (e *TraceError) Error() string {
	return "sim: trace line " + strconv.Itoa(e.Line) + ": " + e.Reason
}

// Unwrap returns [ErrTrace].
func (e *TraceError) Unwrap() error { return ErrTrace }

// MaxLineBytes bounds one trace line.
const MaxLineBytes = 64 << 10

// ReadTrace decodes a JSON-lines trace (see the package documentation).
// Blank lines and lines starting with '#' are skipped. It fails with a
// [*TraceError] naming the line for malformed JSON, unknown fields or ops,
// an empty id, a negative or non-finite or decreasing time, an arrival with
// more than one demand field or negative devices, a departure with demand
// fields, an id that arrives while still present, or a departure of an id
// that is not present.
func ReadTrace(r io.Reader) ([]Event, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxLineBytes)
	var out []Event
	live := map[string]bool{}
	line := 0
	last := 0.0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var ev Event
		if err := dec.Decode(&ev); err != nil {
			return nil, &TraceError{Line: line, Reason: err.Error()}
		}
		if dec.More() {
			return nil, &TraceError{Line: line, Reason: "more than one JSON value"}
		}
		if err := checkEvent(&ev, last, live); err != "" {
			return nil, &TraceError{Line: line, Reason: err}
		}
		last = ev.T
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, &TraceError{Line: line + 1, Reason: err.Error()}
	}
	return out, nil
}

// Validate checks evs as [ReadTrace] checks a file, naming the 1-based
// event index as the line.
func Validate(evs []Event) error {
	live := map[string]bool{}
	last := 0.0
	for i := range evs {
		if err := checkEvent(&evs[i], last, live); err != "" {
			return &TraceError{Line: i + 1, Reason: err}
		}
		last = evs[i].T
	}
	return nil
}

func checkEvent(ev *Event, last float64, live map[string]bool) string {
	switch {
	case math.IsNaN(ev.T) || math.IsInf(ev.T, 0) || ev.T < 0:
		return fmt.Sprintf("bad time %v", ev.T)
	case ev.T < last:
		return fmt.Sprintf("time %v before the previous event's %v", ev.T, last)
	case ev.ID == "":
		return "empty id"
	}
	demands := 0
	if ev.Profile != "" {
		demands++
	}
	if ev.MemoryMB != 0 {
		demands++
	}
	if ev.Percent != 0 {
		demands++
	}
	switch ev.Op {
	case Arrive:
		if demands > 1 {
			return "more than one of profile, memoryMB, percent"
		}
		if ev.Devices < 0 {
			return "negative devices"
		}
		if ev.Percent > 100 {
			return "percent above 100"
		}
		if live[ev.ID] {
			return fmt.Sprintf("id %q arrives while present", ev.ID)
		}
		live[ev.ID] = true
	case Depart:
		if demands > 0 || ev.Devices != 0 {
			return "departure with demand fields"
		}
		if !live[ev.ID] {
			return fmt.Sprintf("id %q departs but is not present", ev.ID)
		}
		delete(live, ev.ID)
	default:
		return fmt.Sprintf("unknown op %q", ev.Op)
	}
	return ""
}

// WriteTrace encodes evs as JSON lines.
func WriteTrace(w io.Writer, evs []Event) error {
	enc := json.NewEncoder(w)
	for i := range evs {
		if err := enc.Encode(&evs[i]); err != nil {
			return err
		}
	}
	return nil
}

package devnodes

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Node is one character device a CDI device injects into a
// container. Major and minor are given, so the container runtime creates
// the node in the container whether or not the host has it (the
// /dev/nvidia-caps nodes of a MIG device usually exist only once
// nvidia-modprobe made them).
type Node struct {
	Path     string // path in the container, e.g. "/dev/nvidia-caps/nvidia-cap30"
	Major    int64
	Minor    int64
	FileMode os.FileMode // permission bits; 0 leaves the runtime's default
}

// ErrNotFound: the device nodes of a device could not be found.
var ErrNotFound = errors.New("nvidia device nodes: not found")

// Error names the file [ErrNotFound] is about.
type Error struct {
	Path string // the file read, relative to Proc.Root
	Err  error
}

func (e *Error) Error() string {
	return "nvidia device nodes: " + e.Path + ": " + e.Err.Error()
}

// Unwrap returns [ErrNotFound] and the cause.
func (e *Error) Unwrap() []error { return []error{ErrNotFound, e.Err} }

// Proc finds device nodes by reading the NVIDIA kernel driver's files
// under Root's /proc, as NVIDIA's own DRA driver does:
//
//   - the parent GPU's minor from /proc/driver/nvidia/gpus/*/information
//     ("GPU UUID" and "Device Minor"); its node is /dev/nvidia<minor>,
//     major 195;
//   - a MIG device's capability minors and modes from
//     /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<GI>/access and
//     .../gi<GI>/ci<CI>/access ("DeviceFileMinor", "DeviceFileMode"); the
//     nodes are /dev/nvidia-caps/nvidia-cap<minor>, with the major of
//     "nvidia-caps" in /proc/devices;
//   - /dev/nvidiactl (195, 255), and /dev/nvidia-uvm (0) and
//     /dev/nvidia-uvm-tools (1) with the major of "nvidia-uvm" in
//     /proc/devices.
//
// /proc/driver is the host's in any mount namespace, so Root is "/" in the
// driver's container too. The zero value reads under "/".
type Proc struct {
	Root string
}

// NVIDIAMajor is the character major of /dev/nvidia* (nvidia-frontend).
const NVIDIAMajor = 195

func (p Proc) path(rel string) string {
	root := p.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, rel)
}

func (p Proc) read(rel string) ([]byte, error) {
	data, err := os.ReadFile(p.path(rel))
	if err != nil {
		return nil, &Error{Path: rel, Err: err}
	}
	return data, nil
}

// majors parses /proc/devices' "<major> <name>" lines of character
// devices.
func (p Proc) majors() (map[string]int64, error) {
	const rel = "proc/devices"
	data, err := p.read(rel)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "Block devices:" {
			break
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if n, err := strconv.ParseInt(f[0], 10, 32); err == nil && n >= 0 {
			out[f[1]] = n
		}
	}
	return out, nil
}

// keyValues parses "Key: value" lines.
func keyValues(data []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// gpuMinor returns the device minor of the GPU with the UUID.
func (p Proc) gpuMinor(gpuUUID string) (int64, error) {
	const dir = "proc/driver/nvidia/gpus"
	entries, err := os.ReadDir(p.path(dir))
	if err != nil {
		return 0, &Error{Path: dir, Err: err}
	}
	for _, e := range entries {
		rel := filepath.Join(dir, e.Name(), "information")
		data, err := p.read(rel)
		if err != nil {
			continue
		}
		kv := keyValues(data)
		if !strings.EqualFold(kv["GPU UUID"], gpuUUID) {
			continue
		}
		n, err := strconv.ParseInt(kv["Device Minor"], 10, 32)
		if err != nil || n < 0 || n >= 255 {
			return 0, &Error{Path: rel, Err: fmt.Errorf("bad Device Minor %q", kv["Device Minor"])}
		}
		return n, nil
	}
	return 0, &Error{Path: dir, Err: fmt.Errorf("no GPU %s", gpuUUID)}
}

// capNode reads one capability access file.
func (p Proc) capNode(rel string, major int64) (Node, error) {
	data, err := p.read(rel)
	if err != nil {
		return Node{}, err
	}
	kv := keyValues(data)
	minor, err := strconv.ParseInt(kv["DeviceFileMinor"], 10, 32)
	if err != nil || minor < 0 {
		return Node{}, &Error{Path: rel, Err: fmt.Errorf("bad DeviceFileMinor %q", kv["DeviceFileMinor"])}
	}
	n := Node{Path: "/dev/nvidia-caps/nvidia-cap" + strconv.FormatInt(minor, 10), Major: major, Minor: minor}
	if m, err := strconv.ParseUint(kv["DeviceFileMode"], 10, 32); err == nil && m <= 0o777 {
		n.FileMode = os.FileMode(m)
	}
	return n, nil
}

// MIGNodes returns the nodes of the MIG device with GPU instance gi and
// compute instance ci on the GPU gpuUUID: its parent GPU's node, then its
// GPU instance's and compute instance's capability nodes.
func (p Proc) MIGNodes(gpuUUID string, gi, ci uint32) ([]Node, error) {
	minor, err := p.gpuMinor(gpuUUID)
	if err != nil {
		return nil, err
	}
	majors, err := p.majors()
	if err != nil {
		return nil, err
	}
	caps, ok := majors["nvidia-caps"]
	if !ok {
		return nil, &Error{Path: "proc/devices", Err: errors.New("no nvidia-caps major")}
	}
	base := fmt.Sprintf("proc/driver/nvidia/capabilities/gpu%d/mig/gi%d", minor, gi)
	giNode, err := p.capNode(base+"/access", caps)
	if err != nil {
		return nil, err
	}
	ciNode, err := p.capNode(fmt.Sprintf("%s/ci%d/access", base, ci), caps)
	if err != nil {
		return nil, err
	}
	return []Node{gpuNode(minor), giNode, ciNode}, nil
}

func gpuNode(minor int64) Node {
	return Node{Path: "/dev/nvidia" + strconv.FormatInt(minor, 10), Major: NVIDIAMajor, Minor: minor, FileMode: 0o666}
}

// GPUNodes returns the GPU's own node.
func (p Proc) GPUNodes(gpuUUID string) ([]Node, error) {
	minor, err := p.gpuMinor(gpuUUID)
	if err != nil {
		return nil, err
	}
	return []Node{gpuNode(minor)}, nil
}

// ControlNodes returns the nodes every container using an NVIDIA GPU
// needs: /dev/nvidiactl, and /dev/nvidia-uvm and /dev/nvidia-uvm-tools
// when the nvidia-uvm module is loaded.
func (p Proc) ControlNodes() ([]Node, error) {
	majors, err := p.majors()
	if err != nil {
		return nil, err
	}
	out := []Node{{Path: "/dev/nvidiactl", Major: NVIDIAMajor, Minor: 255, FileMode: 0o666}}
	if uvm, ok := majors["nvidia-uvm"]; ok {
		out = append(out,
			Node{Path: "/dev/nvidia-uvm", Major: uvm, Minor: 0, FileMode: 0o666},
			Node{Path: "/dev/nvidia-uvm-tools", Major: uvm, Minor: 1, FileMode: 0o666})
	}
	return out, nil
}

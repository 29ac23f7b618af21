package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nftpolicy/nftpolicy/internal/testbin"
)

// Options configure Start.
type Options struct {
	// Bin is the directory holding kube-apiserver and etcd; see BinDir.
	Bin string
	// RBAC selects --authorization-mode=RBAC instead of AlwaysAllow.
	RBAC bool
	// Dir is where certificates, keys, logs and etcd data go; a new
	// temporary directory (removed by Close) when empty.
	Dir string
}

// A Server is a running etcd and kube-apiserver pair.
type Server struct {
	// URL is https://127.0.0.1:<port>.
	URL string
	// AdminToken authenticates as user "admin" in group system:masters.
	AdminToken string
	// CAFile is the PEM file of the CA that signed the serving certificate.
	CAFile string
	// Dir holds everything Start generated, and the logs
	// (etcd.log, kube-apiserver.log).
	Dir string

	opts    Options
	tempDir bool
	caPEM   []byte
	apiArgs []string
	mu      sync.Mutex
	etcd    *testbin.Proc
	api     *testbin.Proc
	closed  bool
}

// BinDir returns the directory of the test binaries: $NFTPOLICY_TOOLS_BIN,
// else hack/tools/bin of the repository around the working directory.
func BinDir() (string, error) {
	if d := os.Getenv("NFTPOLICY_TOOLS_BIN"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "hack", "tools", "go.mod")); err == nil {
			return filepath.Join(d, "hack", "tools", "bin"), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no hack/tools above %s; set NFTPOLICY_TOOLS_BIN", wd)
		}
	}
}

// Missing names what Start would need and cannot find, or returns "".
func Missing(opts Options) string {
	bin := opts.Bin
	if bin == "" {
		var err error
		if bin, err = BinDir(); err != nil {
			return err.Error()
		}
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return fmt.Sprintf("%s (build it with hack/tools/build.sh)", filepath.Join(bin, name))
		}
	}
	return ""
}

// StartTest starts a Server for t and closes it when t ends. It skips t
// when the binaries are missing, or fails it when $CI is set.
func StartTest(t testing.TB, opts Options) *Server {
	t.Helper()
	if m := Missing(opts); m != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("this test needs %s; CI is set, so failing instead of skipping", m)
		}
		t.Skipf("this test needs %s", m)
	}
	s, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-apiserver log tail:\n%s", s.LogTail("kube-apiserver.log", 30))
		}
		s.Close()
	})
	return s
}

// Start generates credentials, starts etcd and kube-apiserver, and returns
// once the API server is ready.
func Start(opts Options) (_ *Server, err error) {
	if opts.Bin == "" {
		if opts.Bin, err = BinDir(); err != nil {
			return nil, err
		}
	}
	s := &Server{opts: opts, Dir: opts.Dir}
	if s.Dir == "" {
		if s.Dir, err = os.MkdirTemp("", "nftpolicy-apiserver-"); err != nil {
			return nil, err
		}
		s.tempDir = true
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.writeCredentials(); err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	ports, err := testbin.FreePorts(3)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	s.etcd, err = s.startProc("etcd", filepath.Join(opts.Bin, "etcd"),
		"--name", "default",
		"--data-dir", filepath.Join(s.Dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL,
		"--log-level", "warn",
		// A test cluster needs no durability; fsync dominates its latency.
		"--unsafe-no-fsync",
	)
	if err != nil {
		return nil, err
	}
	authz := "AlwaysAllow"
	if opts.RBAC {
		authz = "RBAC"
	}
	s.URL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	s.apiArgs = []string{
		"--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(apiPort),
		"--etcd-servers", etcdURL,
		"--tls-cert-file", filepath.Join(s.Dir, "serving.crt"),
		"--tls-private-key-file", filepath.Join(s.Dir, "serving.key"),
		"--client-ca-file", s.CAFile,
		"--token-auth-file", filepath.Join(s.Dir, "tokens.csv"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(s.Dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(s.Dir, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--authorization-mode", authz,
		"--endpoint-reconciler-type", "none",
		"--disable-admission-plugins", "ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v", "1",
	}
	if err := s.StartAPIServer(); err != nil {
		return nil, err
	}
	return s, nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same address with the same credentials, and waits until it is ready.
func (s *Server) StartAPIServer() error {
	s.mu.Lock()
	if s.api != nil {
		s.mu.Unlock()
		return errors.New("kube-apiserver is running")
	}
	s.mu.Unlock()
	p, err := s.startProc("kube-apiserver", filepath.Join(s.opts.Bin, "kube-apiserver"), s.apiArgs...)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.api = p
	s.mu.Unlock()
	return s.waitReady(60 * time.Second)
}

// StopAPIServer stops kube-apiserver (etcd keeps running) and waits until
// it has exited, so that its port refuses connections.
func (s *Server) StopAPIServer() error {
	s.mu.Lock()
	p := s.api
	s.api = nil
	s.mu.Unlock()
	if p == nil {
		return errors.New("kube-apiserver is not running")
	}
	p.Stop(stopGrace)
	return nil
}

// Close stops both processes and removes the directory Start created.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	api, etcd := s.api, s.etcd
	s.api, s.etcd = nil, nil
	s.mu.Unlock()
	if api != nil {
		api.Stop(stopGrace)
	}
	if etcd != nil {
		etcd.Stop(stopGrace)
	}
	if s.tempDir {
		os.RemoveAll(s.Dir)
	}
}

// Config returns a client configuration authenticated with token (the
// admin token when empty).
func (s *Server) Config(token string) *rest.Config {
	if token == "" {
		token = s.AdminToken
	}
	return &rest.Config{
		Host:            s.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.caPEM},
		QPS:             100,
		Burst:           200,
	}
}

// Client returns an admin clientset.
func (s *Server) Client() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(s.Config(""))
}

// WriteKubeconfig writes a kubeconfig for token (the admin token when
// empty) to path.
func (s *Server) WriteKubeconfig(path, token string) error {
	if token == "" {
		token = s.AdminToken
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: test
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, s.URL, s.CAFile, token)
	return os.WriteFile(path, []byte(kc), 0o600)
}

// ServiceAccountToken mints a token for namespace/name through the
// TokenRequest API, as the kubelet does for a pod's projected token.
func (s *Server) ServiceAccountToken(ctx context.Context, namespace, name string, ttl time.Duration) (string, error) {
	client, err := s.Client()
	if err != nil {
		return "", err
	}
	secs := int64(ttl / time.Second)
	tr, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for serviceaccount %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// LogTail returns the last lines of one of the logs in Dir.
func (s *Server) LogTail(name string, lines int) string {
	return testbin.Tail(filepath.Join(s.Dir, name), lines)
}

func (s *Server) startProc(name, bin string, args ...string) (*testbin.Proc, error) {
	log, err := os.OpenFile(filepath.Join(s.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, and killed if the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := testbin.StartLocked(cmd); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := testbin.Started(cmd)
	go func() {
		<-p.Done()
		log.Close()
	}()
	return p, nil
}

// stopGrace is how long etcd and kube-apiserver get to exit after SIGTERM
// before they are killed.
const stopGrace = 10 * time.Second

func (s *Server) waitReady(timeout time.Duration) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.caPEM)
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		s.mu.Lock()
		api := s.api
		s.mu.Unlock()
		select {
		case <-api.Done():
			return fmt.Errorf("kube-apiserver exited: %s\n%s", api.Cmd.ProcessState, s.LogTail("kube-apiserver.log", 20))
		default:
		}
		req, _ := http.NewRequest("GET", s.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+s.AdminToken)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver not ready after %v (%s)\n%s", timeout, last, s.LogTail("kube-apiserver.log", 20))
}

// writeCredentials writes the CA, the serving certificate for 127.0.0.1,
// the service-account key pair and the token file.
func (s *Server) writeCredentials() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nftpolicy-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	token := make([]byte, 16)
	rand.Read(token)
	s.AdminToken = hex.EncodeToString(token)
	s.caPEM = pemBlock("CERTIFICATE", caDER)
	s.CAFile = filepath.Join(s.Dir, "ca.crt")

	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.crt":      s.caPEM,
		"serving.crt": pemBlock("CERTIFICATE", srvDER),
		"serving.key": pemBlock("EC PRIVATE KEY", srvKeyDER),
		"sa.key":      pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)),
		"sa.pub":      pemBlock("PUBLIC KEY", saPubDER),
		// token,user,uid,"group,..."
		"tokens.csv": []byte(s.AdminToken + `,admin,admin-uid,"system:masters"` + "\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

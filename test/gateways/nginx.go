package gateways

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Nginx is Debian's nginx (OpenSSL) serving mTLS from the volume, reloaded
// as in production: `nginx -t`, then `nginx -s reload` (SIGHUP to the
// master, which starts workers on the new configuration and files, and
// lets the old ones finish).
var Nginx = FileGateway{
	Name:   "nginx",
	Layout: func() (string, string, string) { return "tls.crt", "tls.key", "ca.crt" },
	Start:  startNginx,
}

type nginx struct {
	p    *proc
	args []string // -p, -c and -e, for every command
	log  string
}

// nginxConf is the configuration: one master, one worker, everything
// under dir, a server on addr requiring a client certificate from the
// volume's bundle, answering 200 to a client it let through.
const nginxConf = `%s
worker_processes 1;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log info;
events { worker_connections 256; }
http {
	access_log off;
	client_body_temp_path %[2]s/tmp/body;
	proxy_temp_path %[2]s/tmp/proxy;
	fastcgi_temp_path %[2]s/tmp/fastcgi;
	uwsgi_temp_path %[2]s/tmp/uwsgi;
	scgi_temp_path %[2]s/tmp/scgi;
	server {
		listen %[3]s ssl;
		server_name %[4]s;
		ssl_certificate %[5]s/tls.crt;
		ssl_certificate_key %[5]s/tls.key;
		ssl_client_certificate %[5]s/ca.crt;
		ssl_verify_client on;
		ssl_verify_depth 4;
		location / { return 200 "through\n"; }
	}
}
`

func startNginx(ctx context.Context, dir, vol, addr string) (reloader, error) {
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, err
	}
	// A master started as root would run its workers as nobody, who cannot
	// enter the test's directories: they run as the test's user.
	user := ""
	if os.Getuid() == 0 {
		user = "user root;"
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, user, dir, addr, ServerName, vol), 0o600); err != nil {
		return nil, err
	}
	n := &nginx{args: []string{"-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")}, log: filepath.Join(dir, "error.log")}
	if err := command(ctx, "nginx", append([]string{"-t", "-q"}, n.args...)...); err != nil {
		return nil, err
	}
	p, err := startProc(filepath.Join(dir, "nginx.out"), "nginx", append(n.args, "-g", "daemon off;")...)
	if err != nil {
		return nil, err
	}
	n.p = p
	if err := waitTLS(ctx, p, addr, time.Minute); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

// Reload tests the configuration (which reads the files) and signals the
// master, then waits until the master has started a worker on the new
// configuration: an [emerg] it logs instead, or no new worker within 15 s,
// is a refusal too.
func (n *nginx) Reload(ctx context.Context) error {
	if err := n.p.alive(); err != nil {
		return err
	}
	workers, emerg := countIn(n.log, "start worker process "), countIn(n.log, "[emerg]")
	if err := command(ctx, "nginx", append([]string{"-t", "-q"}, n.args...)...); err != nil {
		return err
	}
	if err := command(ctx, "nginx", append([]string{"-s", "reload"}, n.args...)...); err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if countIn(n.log, "[emerg]") > emerg {
			return fmt.Errorf("nginx refused the reload: %s", tailFile(n.log, 3))
		}
		if countIn(n.log, "start worker process ") > workers {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // the test is over: not a refusal
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("nginx started no worker within 15 s of the reload: %s", tailFile(n.log, 3))
}

func (n *nginx) Stop() { n.p.stop() }

// countIn counts the lines of a file that contain s.
func countIn(path, s string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), s)
}

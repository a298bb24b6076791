package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvfabric/kvfabric/internal/certs"
)

func init() {
	var dir, hosts, clients, admins string
	var validity time.Duration
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make a test CA, a master certificate and client certificates for mutual TLS",
		Long: `certs writes, into --dir (created if missing; existing files are never
overwritten): ca.pem (the CA certificate; its key is not kept), server.pem and
server-key.pem for the master (valid for --hosts), and <name>.pem and
<name>-key.pem for every --clients and --admins name. A client certificate's
subject common name is the client's principal; admins get the organizational
unit "admin" (the admin role). For tests and first deployments; see
docs/security.md for running the master and clients with them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return fmt.Errorf("--dir: %w", err)
			}
			ca, err := certs.NewCA("kvfabric CA", validity)
			if err != nil {
				return err
			}
			if err := ca.WriteCA(dir); err != nil {
				return err
			}
			srv, err := ca.Server(split(hosts), validity)
			if err != nil {
				return fmt.Errorf("--hosts %q: %w", hosts, err)
			}
			if err := srv.Write(dir, "server"); err != nil {
				return err
			}
			for _, group := range []struct {
				names []string
				admin bool
			}{{split(clients), false}, {split(admins), true}} {
				for _, n := range group.names {
					if strings.ContainsAny(n, "/\\ ") || n == "ca" || n == "server" {
						return fmt.Errorf("client name %q: no slashes or spaces, not ca or server", n)
					}
					p, err := ca.Client(n, group.admin, validity)
					if err != nil {
						return err
					}
					if err := p.Write(dir, n); err != nil {
						return err
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote ca.pem, server.pem/server-key.pem (hosts %s) and client certificates to %s\n", hosts, dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "kvfabric-certs", "output directory")
	f.StringVar(&hosts, "hosts", "localhost,127.0.0.1", "comma-separated DNS names and IP addresses of the master")
	f.StringVar(&clients, "clients", "", "comma-separated client principals (role client)")
	f.StringVar(&admins, "admins", "", "comma-separated admin principals (role admin)")
	f.DurationVar(&validity, "validity", 365*24*time.Hour, "how long the certificates are valid")
	rootCmd.AddCommand(cmd)
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

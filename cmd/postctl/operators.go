package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	accounts "github.com/postline/postline/internal/operator"
)

func newOperatorsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "operators",
		Short: "The console's accounts: add, list, disable, set a password",
		Long: `Manage the operator console's accounts in PostgreSQL (--database-url, table
postline_console_operators). A viewer searches and reads; an operator also acts
(adds and removes suppressions). Passwords are read from the terminal (asked
twice) or from the first line of standard input, never from the command line,
and are stored as argon2id hashes. Disabling an account or setting its password
ends its sessions at once.`,
	}
	cmd.AddCommand(newOperatorsAddCmd(g), newOperatorsLsCmd(g), newOperatorsDisableCmd(g), newOperatorsPasswdCmd(g))
	return cmd
}

// openOperators connects to --database-url and returns the accounts'
// store and a func that closes the connections.
func openOperators(ctx context.Context, g *globals) (*accounts.Store, func(), error) {
	return openOnPool(ctx, g, func(pool *pgxpool.Pool) (*accounts.Store, error) {
		return accounts.New(accounts.Config{}, pool)
	})
}

// readPassword reads a new password for name: from the terminal, asked
// twice without echo, when standard input is one; else the first line of
// standard input. It is checked before any connection is made.
func readPassword(g *globals, name string) (string, error) {
	var password string
	if f, ok := g.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		var err error
		if password, err = promptTwice(g.stderr, int(f.Fd()), name); err != nil {
			return "", err
		}
	} else {
		line, err := bufio.NewReaderSize(io.LimitReader(g.stdin, accounts.MaxPasswordBytes+2), accounts.MaxPasswordBytes+2).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("reading the password from standard input: %w", err)
		}
		password = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if password == "" {
			return "", usagef("no password on standard input: type it at the prompt, or pipe it as the first line")
		}
	}
	if err := accounts.CheckPassword(password); err != nil {
		return "", usagef("%w", err)
	}
	return password, nil
}

func promptTwice(w io.Writer, fd int, name string) (string, error) {
	ask := func(prompt string) (string, error) {
		fmt.Fprint(w, prompt)
		b, err := term.ReadPassword(fd)
		fmt.Fprintln(w)
		return string(b), err
	}
	first, err := ask("Password for " + name + ": ")
	if err != nil {
		return "", err
	}
	again, err := ask("Again: ")
	if err != nil {
		return "", err
	}
	if first != again {
		return "", usagef("the two passwords differ: nothing was changed")
	}
	return first, nil
}

func newOperatorsAddCmd(g *globals) *cobra.Command {
	var role string
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Create an account, reading its password",
		Long: `Create the account NAME (1 to 64 of a-z, 0-9, '.', '_', '@', '-') with --role
viewer or operator, reading its password (12 characters or more) from the
terminal or the first line of standard input.

--output json prints {"name", "role"}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := accounts.ParseRole(role)
			if err != nil {
				return usagef("--role: %w", err)
			}
			if err := accounts.CheckName(args[0]); err != nil {
				return usagef("%w", err)
			}
			password, err := readPassword(g, args[0])
			if err != nil {
				return err
			}
			store, closeDB, err := openOperators(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer closeDB()
			if err := store.Add(cmd.Context(), args[0], r, password); err != nil {
				return withMigrateHint(err)
			}
			return g.print(map[string]string{"name": args[0], "role": string(r)}, fmt.Sprintf("added %s (%s)", args[0], r))
		},
	}
	cmd.Flags().StringVar(&role, "role", string(accounts.RoleViewer), "viewer (reads) or operator (reads and acts)")
	return cmd
}

// operatorRecord is an account in JSON output.
type operatorRecord struct {
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	State      string     `json:"state"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
}

func newOperatorsLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the accounts",
		Long: `List every account by name: its role, whether it is enabled, when it was made
and last changed.

--output json prints {"operators": [{"name", "role", "state", "created_at",
"updated_at", "disabled_at"?}]}; times are RFC 3339 in UTC.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, closeDB, err := openOperators(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer closeDB()
			list, err := store.List(cmd.Context())
			if err != nil {
				return withMigrateHint(err)
			}
			recs := make([]operatorRecord, len(list))
			rows := make([][]string, len(list))
			for i, a := range list {
				state := "enabled"
				if !a.DisabledAt.IsZero() {
					state = "disabled"
				}
				recs[i] = operatorRecord{Name: a.Name, Role: string(a.Role), State: state, CreatedAt: a.CreatedAt.UTC(),
					UpdatedAt: a.UpdatedAt.UTC(), DisabledAt: timePtr(a.DisabledAt)}
				rows[i] = []string{a.Name, string(a.Role), state, a.CreatedAt.UTC().Format(time.RFC3339), a.UpdatedAt.UTC().Format(time.RFC3339)}
			}
			return printReport(g, map[string]any{"operators": recs}, func() error {
				if len(recs) == 0 {
					_, err := fmt.Fprintln(g.stdout, "no accounts yet: postctl operators add NAME --role operator")
					return err
				}
				return writeTable(g.stdout, []string{"NAME", "ROLE", "STATE", "CREATED", "UPDATED"}, rows)
			})
		},
	}
}

func newOperatorsDisableCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "disable NAME",
		Short: "Refuse an account's logins and end its sessions",
		Long: `Disable the account NAME: its logins are refused and its sessions end at once.
The account stays, so the audit log still names it.

--output json prints {"name", "state"}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, closeDB, err := openOperators(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer closeDB()
			if err := store.Disable(cmd.Context(), args[0]); err != nil {
				return withMigrateHint(err)
			}
			return g.print(map[string]string{"name": args[0], "state": "disabled"}, "disabled "+args[0]+": its sessions ended")
		},
	}
}

func newOperatorsPasswdCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "passwd NAME",
		Short: "Set an account's password, reading it, and end its sessions",
		Long: `Set the password of NAME, read from the terminal or the first line of standard
input; the account's sessions end at once.

--output json prints {"name"}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			password, err := readPassword(g, args[0])
			if err != nil {
				return err
			}
			store, closeDB, err := openOperators(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer closeDB()
			if err := store.SetPassword(cmd.Context(), args[0], password); err != nil {
				return withMigrateHint(err)
			}
			return g.print(map[string]string{"name": args[0]}, "password of "+args[0]+" set: its sessions ended")
		},
	}
}

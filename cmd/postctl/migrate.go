package main

import (
	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/schema"
)

func newMigrateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply the database migrations (safe to run again and concurrently)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pool, err := openPool(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := schema.Migrate(cmd.Context(), pool); err != nil {
				return err
			}
			return g.print(map[string]bool{"migrated": true}, "migrations applied")
		},
	}
}

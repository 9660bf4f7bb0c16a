package luascripts

import (
	"strconv"

	"github.com/yuin/gopher-lua/ast"
)

// Multiple assignment, as Lua 5.1 runs it. Lua evaluates every expression
// of `a, b = b, a` before it assigns anything; gopher-lua assigns each
// target as soon as its value is computed (yuin/gopher-lua#440), so a
// swap leaves both names holding the same value, and `a, b = b:sub(2),
// a:sub(2)` reads the a it just wrote. Before compiling, every assignment
// to more than one target is rewritten into what Lua 5.1 does:
//
//	a, t[k] = e1, e2
//
// becomes
//
//	do
//	  local (o2), (k2) = t, k          -- the targets' tables and keys, left to right
//	  local (v1), (v2) = e1, e2        -- then the values, left to right
//	  (o2)[(k2)] = (v2)                -- then the assignments, last to first,
//	  a = (v1)                         -- as Lua 5.1's code generator orders them
//	end
//
// The temporaries' names cannot be written in Lua, so they shadow nothing
// the script can name; each statement keeps its line for error messages.
// TestDifferential's scripts-edge corpus holds the cases against a real
// redis-server.

// fixAssignments rewrites the multiple assignments of block and of every
// block and function nested in it.
func fixAssignments(block []ast.Stmt) {
	for i, s := range block {
		fixStmt(s)
		if a, ok := s.(*ast.AssignStmt); ok && len(a.Lhs) > 1 {
			block[i] = splitAssign(a)
		}
	}
}

// splitAssign is a's rewrite (the top of this file).
func splitAssign(a *ast.AssignStmt) ast.Stmt {
	line := a.Line()
	var pre ast.LocalAssignStmt // the targets' tables and keys
	targets := make([]ast.Expr, len(a.Lhs))
	for i, l := range a.Lhs {
		g, ok := l.(*ast.AttrGetExpr)
		if !ok {
			targets[i] = l
			continue
		}
		o, k := temp(line, "o", i), temp(line, "k", i)
		pre.Names = append(pre.Names, o.Value, k.Value)
		pre.Exprs = append(pre.Exprs, g.Object, g.Key)
		t := &ast.AttrGetExpr{Object: o, Key: k}
		t.SetLine(g.Line())
		targets[i] = t
	}
	vals := &ast.LocalAssignStmt{Exprs: a.Rhs}
	vals.SetLine(line)
	var stmts []ast.Stmt
	if len(pre.Names) > 0 {
		pre.SetLine(line)
		stmts = append(stmts, &pre)
	}
	stmts = append(stmts, vals)
	for i := range targets {
		vals.Names = append(vals.Names, temp(line, "v", i).Value)
	}
	for i := len(targets) - 1; i >= 0; i-- {
		s := &ast.AssignStmt{Lhs: []ast.Expr{targets[i]}, Rhs: []ast.Expr{temp(line, "v", i)}}
		s.SetLine(line)
		stmts = append(stmts, s)
	}
	do := &ast.DoBlockStmt{Stmts: stmts}
	do.SetLine(line)
	do.SetLastLine(a.LastLine())
	return do
}

// temp names the i-th temporary of kind in a rewrite: "(v1)" cannot be
// written in Lua.
func temp(line int, kind string, i int) *ast.IdentExpr {
	e := &ast.IdentExpr{Value: "(" + kind + strconv.Itoa(i+1) + ")"}
	e.SetLine(line)
	return e
}

func fixStmt(s ast.Stmt) {
	switch s := s.(type) {
	case *ast.AssignStmt:
		fixExprs(s.Lhs...)
		fixExprs(s.Rhs...)
	case *ast.LocalAssignStmt:
		fixExprs(s.Exprs...)
	case *ast.FuncCallStmt:
		fixExprs(s.Expr)
	case *ast.DoBlockStmt:
		fixAssignments(s.Stmts)
	case *ast.WhileStmt:
		fixExprs(s.Condition)
		fixAssignments(s.Stmts)
	case *ast.RepeatStmt:
		fixAssignments(s.Stmts)
		fixExprs(s.Condition)
	case *ast.IfStmt:
		fixExprs(s.Condition)
		fixAssignments(s.Then)
		fixAssignments(s.Else)
	case *ast.NumberForStmt:
		fixExprs(s.Init, s.Limit, s.Step)
		fixAssignments(s.Stmts)
	case *ast.GenericForStmt:
		fixExprs(s.Exprs...)
		fixAssignments(s.Stmts)
	case *ast.FuncDefStmt:
		fixExprs(s.Func)
	case *ast.ReturnStmt:
		fixExprs(s.Exprs...)
	}
}

// fixExprs finds the functions among es and their subexpressions.
func fixExprs(es ...ast.Expr) {
	for _, e := range es {
		switch e := e.(type) {
		case *ast.FunctionExpr:
			fixAssignments(e.Stmts)
		case *ast.AttrGetExpr:
			fixExprs(e.Object, e.Key)
		case *ast.TableExpr:
			for _, f := range e.Fields {
				fixExprs(f.Key, f.Value)
			}
		case *ast.FuncCallExpr:
			fixExprs(e.Func, e.Receiver)
			fixExprs(e.Args...)
		case *ast.LogicalOpExpr:
			fixExprs(e.Lhs, e.Rhs)
		case *ast.RelationalOpExpr:
			fixExprs(e.Lhs, e.Rhs)
		case *ast.StringConcatOpExpr:
			splitConcat(e)
			fixExprs(e.Lhs, e.Rhs)
		case *ast.ArithmeticOpExpr:
			fixExprs(e.Lhs, e.Rhs)
		case *ast.UnaryMinusOpExpr:
			fixExprs(e.Expr)
		case *ast.UnaryNotOpExpr:
			fixExprs(e.Expr)
		case *ast.UnaryLenOpExpr:
			fixExprs(e.Expr)
		}
	}
}

// maxConcat is how many operands one `..` instruction joins at most.
// gopher-lua joins a whole chain `a .. b .. c …` in one instruction, and
// the memory budget is checked between instructions (budget.go): a chain
// of n copies of a string just under the budget would build n budgets at
// once. splitConcat cuts a longer chain: its tail becomes the argument of
// concatName, a function that returns its argument, so that the tail is
// joined first, by its own instruction, and checked before the rest.
const maxConcat = 4

// concatName is the global the split chains call: "(concat)" cannot be
// written in Lua, so no script can shadow it.
const concatName = "(concat)"

// splitConcat cuts the chain e at its maxConcat-th operand.
func splitConcat(e *ast.StringConcatOpExpr) {
	n := e
	for i := 1; ; i++ {
		next, ok := n.Rhs.(*ast.StringConcatOpExpr)
		if !ok {
			return
		}
		if i == maxConcat-1 {
			fn := &ast.IdentExpr{Value: concatName}
			fn.SetLine(next.Line())
			call := &ast.FuncCallExpr{Func: fn, Args: []ast.Expr{next}}
			call.SetLine(next.Line())
			n.Rhs = call
			return
		}
		n = next
	}
}

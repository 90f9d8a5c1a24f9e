"""The rules of Tic Tac Toe, pure and small: a board is a 9-character string of `X`, `O` and `.` read row by row;
cells are numbered 1..9 the same way. X moves first, so the side to move follows from the counts. `best_moves`
is a perfect player (minimax over the whole game tree, cached: there are fewer than 6,000 positions)."""
from __future__ import annotations

import random
from functools import lru_cache

EMPTY = "........."
LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def check_board(board: str) -> str:
    """The board if it is a reachable, unfinished position; else a ValueError saying why."""
    if len(board) != 9 or set(board) - set("XO."):
        raise ValueError(f"a board is 9 characters of X, O and '.', not {board!r}")
    xs, os_ = board.count("X"), board.count("O")
    if xs - os_ not in (0, 1):
        raise ValueError(f"X moves first, so X has as many marks as O or one more: {board!r}")
    if winner(board) or "." not in board:
        raise ValueError(f"the game on {board!r} is already over")
    return board


def to_move(board: str) -> str:
    return "X" if board.count("X") == board.count("O") else "O"


def winner(board: str) -> str | None:
    for a, b, c in LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


def is_over(board: str) -> bool:
    return winner(board) is not None or "." not in board


def legal_moves(board: str) -> list[int]:
    """Empty cells, numbered 1..9."""
    return [i + 1 for i, cell in enumerate(board) if cell == "."] if not is_over(board) else []


def play(board: str, cell: int) -> str:
    """The board after the side to move marks `cell` (1..9); a ValueError for an illegal move."""
    if cell not in legal_moves(board):
        raise ValueError(f"cell {cell} is not free" if 1 <= cell <= 9 else f"there is no cell {cell}")
    i = cell - 1
    return board[:i] + to_move(board) + board[i + 1:]


def render(board: str) -> str:
    """Rows of marks, with the numbers of the free cells shown where they are."""
    cells = [c if c != "." else str(i + 1) for i, c in enumerate(board)]
    return "\n".join(" ".join(cells[r * 3:r * 3 + 3]) for r in range(3))


@lru_cache(maxsize=None)
def value(board: str) -> int:
    """The game's value for the side to move under perfect play: 1 win, 0 draw, -1 loss."""
    if winner(board):
        return -1  # the side that just moved won
    if "." not in board:
        return 0
    return max(-value(play(board, cell)) for cell in legal_moves(board))


def best_moves(board: str) -> list[int]:
    """Every move that keeps the best value for the side to move."""
    moves = legal_moves(board)
    best = max(-value(play(board, cell)) for cell in moves)
    return [cell for cell in moves if -value(play(board, cell)) == best]


def random_position(rng: random.Random, plies: int) -> str:
    """An unfinished position reached by `plies` random moves from the empty board."""
    while True:
        board = EMPTY
        for _ in range(plies):
            board = play(board, rng.choice(legal_moves(board)))
            if is_over(board):
                break
        if not is_over(board):
            return board

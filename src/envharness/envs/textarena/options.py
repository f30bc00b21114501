"""The game options a client may send with `reset`, and their bounds (checked by the server first).

A game's keyword arguments are its size: Minesweeper 2000x2000 or TowerOfHanoi with 3e6 disks
costs seconds and megabytes per reset. Every argument of every game this server runs is here
(tests/test_textarena_options.py compares with the games' constructors), bounded near what
textarena registers: up to about twice its largest variant where the cost grows gently, at its
largest where building a game already takes long (Sokoban's rooms, Slitherlink's grids).
Arguments a client must not choose (`WITHHELD`) are refused whatever their value.
"""

from __future__ import annotations

from collections.abc import Mapping

from envharness.core.option_bounds import (
    Bound,
    ResetOptions,
    any_of,
    flag,
    integer,
    list_of,
    number,
    one_of,
    text,
)

TURNS = integer(1, 1000)
ROUNDS = integer(1, 100)
TALK = integer(0, 10)
PAYOFF = number(-1000, 1000)
CHIPS = integer(1, 100_000)
HARD = {"hardcore": flag()}

#: Game (class name) -> its keyword arguments a client may set, and their bounds.
GAME_OPTIONS: dict[str, dict[str, Bound]] = {
    # single-player
    "Game2048": {"target_tile": integer(4, 2**17), "board_size": integer(2, 12)},
    "Bandit": {
        "buttons": list_of(text(32), 12, min_items=2),
        "p_gap": number(0, 1),
        "num_turns": integer(1, 200),
        "include_summary": flag(),
    },
    "Blackjack": {"num_hands": integer(1, 50)},
    "Countdown": {
        "numbers": list_of(integer(1, 1000), 8, min_items=1),
        "target": integer(1, 10_000),
        "max_turns": TURNS,
    },
    "Crosswords": {**HARD, "max_turns": TURNS, "num_words": integer(1, 10)},
    "Cryptarithm": {"equation": text(64), "max_turns": TURNS},
    "FifteenPuzzle": {"max_turns": TURNS},
    "FrozenLake": {"size": integer(2, 12), "num_holes": integer(0, 40), "randomize_start_goal": flag()},
    "GuessTheNumber": {
        "min_number": integer(-1_000_000, 1_000_000),
        "max_number": integer(-1_000_000, 1_000_000),
        "max_turns": TURNS,
    },
    "GuessWho": {"max_turns": TURNS},
    "Hangman": dict(HARD),
    "LightsOut": {"size": integer(2, 12), "max_turns": TURNS},
    "LogicPuzzle": {"difficulty": one_of("easy", "medium", "hard"), "max_turns": TURNS},
    "Mastermind": {
        "code_length": integer(1, 10),
        "num_numbers": integer(1, 20),
        "max_turns": TURNS,
        "duplicate_numbers": flag(),
    },
    "Minesweeper": {
        "rows": integer(2, 24),
        "cols": integer(2, 24),
        "num_mines": integer(1, 150),
        "max_turns": TURNS,
    },
    "PegJump": {"initial_empty": integer(1, 14)},
    "RushHour": {"difficulty": one_of("easy", "medium", "hard")},
    "Secretary": {"N": integer(1, 100)},
    "Set": {},  # its one argument, seed, is reset's own
    "Slitherlink": {"rows": integer(2, 6), "cols": integer(2, 6), "max_turns": TURNS},
    "Sokoban": {
        "dim_room": list_of(integer(5, 8), 2, min_items=2),
        "max_turns": TURNS,
        "num_boxes": integer(1, 5),
    },
    "Sudoku": {"clues": integer(20, 80), "max_turns": TURNS},
    "ThreeCardMonte": {"num_cups": integer(2, 10), "steps": integer(1, 50)},
    "TowerOfHanoi": {"num_disks": integer(1, 10), "max_turns": integer(1, 2100)},
    "TwentyQuestions": {**HARD, "max_turns": TURNS},
    "WordLadder": {"min_distance": integer(1, 20), "max_distance": integer(1, 20), "max_turns": TURNS},
    "Wordle": {**HARD, "word_length": integer(3, 8), "num_guesses": integer(1, 20)},
    "WordSearch": {**HARD, "max_turns": TURNS},
    # multi-player
    "Alquerque": {},
    "Battleship": {"grid_size": integer(5, 20)},
    "Breakthrough": {"is_open": flag(), "board_size": integer(4, 12)},
    "Briscola": {},
    "Chopsticks": {"max_turns": TURNS},
    "ColonelBlotto": {
        "num_fields": integer(1, 10),
        "num_total_units": integer(1, 200),
        "num_rounds": integer(1, 50),
    },
    "ConnectFour": {"is_open": flag(), "num_rows": integer(4, 16), "num_cols": integer(4, 16)},
    "Crusade": {},
    "DontSayIt": {"max_turns": TURNS, **HARD},
    "GameOfPureStrategy": {},
    "GermanWhist": {},
    "Golf": {"num_cards": integer(2, 12), "num_columns": integer(1, 6)},
    "HighSociety": {},
    "IndianPoker": {"max_rounds": integer(1, 50), "starting_chips": CHIPS},
    "IteratedMatchingPennies": {"num_rounds": ROUNDS},
    "IteratedPrisonersDilemma": {
        "num_rounds": ROUNDS,
        "communication_turns": TALK,
        "cooperate_reward": PAYOFF,
        "defect_reward": PAYOFF,
        "sucker_reward": PAYOFF,
        "mutual_defect_reward": PAYOFF,
    },
    "IteratedRockPaperScissors": {"num_rounds": ROUNDS},
    "IteratedTwoThirdsAverage": {
        "num_rounds": ROUNDS,
        "min_guess": number(-1_000_000, 1_000_000),
        "max_guess": number(-1_000_000, 1_000_000),
    },
    "KuhnPoker": {"max_rounds": integer(1, 50)},
    "LinesOfAction": {},
    "LetterAuction": {"starting_coins": integer(1, 1000), "max_turns": TURNS},
    "MemoryGame": {"grid_size": integer(2, 10), "max_turns": TURNS},
    "Nim": {"piles": list_of(integer(1, 100), 10, min_items=1)},
    "Othello": {"board_size": integer(4, 16), "show_valid": flag()},
    "PigDice": {"winning_score": integer(1, 1000), "max_turns": TURNS},
    "QuantumTicTacToe": {},
    "SimpleBlindAuction": {
        "starting_capital": CHIPS,
        "num_items": integer(1, 10),
        "conversation_rounds": TALK,
        "base_item_values": list_of(number(0, 1_000_000), 10),
    },
    "SimpleNegotiation": {"max_turns": TURNS},
    "SimpleTak": {"board_size": integer(3, 8)},
    "SpellingBee": {"num_letters": integer(3, 12)},
    "SpiteAndMalice": {},
    "Stratego": {},
    "Tak": {"board_size": integer(3, 8), "stones": integer(1, 60), "capstones": integer(0, 3)},
    "TicTacToe": {},
    "TruthAndDeception": {"max_turns": TURNS},
    "TwoDollar": {
        "total_amount": number(0, 1_000_000),
        "max_rounds": ROUNDS,
        "error_allowance": integer(0, 20),
    },
    "UltimateTicTacToe": {},
    "IteratedUltimatumGame": {"pool": integer(1, 1000), "max_turns": TURNS, "alternate_roles": flag()},
    "WildTicTacToe": {},
    "WordChains": {},
    "Snake": {
        "width": integer(3, 20),
        "height": integer(3, 20),
        "num_apples": integer(1, 20),
        "max_turns": TURNS,
    },
    "Surround": {"width": integer(3, 20), "height": integer(3, 20), "max_turns": TURNS},
    "Taboo": {
        "categories": list_of(text(32), 10, min_items=1),
        "max_rounds": integer(1, 50),
        "max_attempts_per_player": integer(1, 20),
    },
    "LiarsDice": {"num_dice": integer(1, 20)},
    "Poker": {"num_rounds": ROUNDS, "starting_chips": CHIPS, "small_blind": CHIPS, "big_blind": CHIPS},
    "PublicGoodsGame": {
        "num_rounds": ROUNDS,
        "communication_turns": TALK,
        "endowment": CHIPS,
        "multiplication_factor": number(0, 100),
    },
    "MarketEntryGame": {
        "num_rounds": ROUNDS,
        "communication_turns": TALK,
        "market_capacity": integer(1, 15),
        "entry_profit": PAYOFF,
        "overcrowding_penalty": PAYOFF,
        "safe_payoff": PAYOFF,
    },
    "ThreePlayerTicTacToe": {},
    "ThreePlayerGOPS": {},
    "ThreePlayerIPD": {
        "num_rounds": ROUNDS,
        "communication_turns": TALK,
        "cooperate_reward": PAYOFF,
        "defect_reward": PAYOFF,
        "sucker_reward": PAYOFF,
        "mutual_defect_reward": PAYOFF,
    },
    "CharacterConclave": {"character_budget": integer(1, 20_000)},
    "Codenames": {**HARD, "max_turns": TURNS},
    "SettlersOfCatan": {"player_move_allowance": integer(1, 50), "max_turns": TURNS},
    "SecretMafia": {"mafia_ratio": number(0, 1), "discussion_rounds": TALK},
    "Santorini": {"is_open": flag(), "show_valid": flag(), "error_allowance": integer(0, 50)},
    "NewRecruit": {"max_turns": TURNS, "error_allowance": integer(0, 20)},
}

#: Arguments a client may not set, whatever the value, and why.
WITHHELD: dict[str, str] = {
    "data_path": "a file on the server (the operator's to choose, with TEXTARENA_KW_data_path)",
    "player_roles": "the seats' roles follow the server's seating",
    "num_players": "reset's own option num_players sets the players",
    "default_num_players": "reset's own option num_players sets the players",
    "seed": "reset's own option seed seeds the game",
}

#: What every TextArena reset takes besides the game's arguments (`environment.reset`).
COMMON: Mapping[str, Bound] = {
    "task": text(128),
    "env_id": text(128),
    "num_players": integer(1, 16),
    "opponent": text(256),
    "seat": any_of(integer(0, 15), text(32)),
}


def game_options(env_id: str) -> Mapping[str, Bound]:
    """The game arguments `env_id` takes from a client (InvalidOptions for a game not run here)."""
    from envharness.envs.textarena import games

    family = games.game_of(games.check_env_id(env_id)) or ""
    return GAME_OPTIONS.get(family, {})


RESET_OPTIONS = ResetOptions(COMMON, by_task=game_options, task_keys=("task", "env_id"))

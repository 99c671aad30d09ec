import pytest

from orthrus_rag.rag.answer import clean_answer, extract_answer, find_answer, first_sentence

CASES = [
    ("So the answer is: Paris.", "Paris"),
    ("So the answer is: Paris", "Paris"),
    ("so the answer is Paris.", "Paris"),
    ("The answer is Marie Curie. She won two Nobel prizes.", "Marie Curie"),
    ("Thus, the answer is: 20 March 851.", "20 March 851"),
    ("Answer: Lisbon", "Lisbon"),
    ("Final answer: Lisbon.", "Lisbon"),
    ("A: Lisbon", "Lisbon"),
    ("Lisbon", "Lisbon"),
    ("Lisbon.", "Lisbon"),
    ("  Lisbon!  ", "Lisbon"),
    ('"The Copper Orchard"', "The Copper Orchard"),
    ("“Night Ferry”.", "Night Ferry"),
    ("'Dune'", "Dune"),
    ("**Oslo**", "Oslo"),
    ("The answer is **Oslo**.", "Oslo"),
    ("Yes", "yes"),
    ("Yes.", "yes"),
    ("yes, both are American.", "yes"),
    ("No, they are from different countries.", "no"),
    ("NO", "no"),
    ("So the answer is: no.", "no"),
    ("So the answer is: Yes, they are.", "yes"),
    ("Norway", "Norway"),
    ("Nobody knows", "Nobody knows"),
    ("Noel Coward.", "Noel Coward"),
    ("J. R. R. Tolkien wrote it.", "J. R. R. Tolkien wrote it"),
    ("So the answer is: J. R. R. Tolkien.", "J. R. R. Tolkien"),
    ("So the answer is: St. Louis, Missouri.", "St. Louis, Missouri"),
    ("So the answer is: Sammy Davis Jr.", "Sammy Davis Jr"),
    ("O.K. Connery", "O.K. Connery"),
    ("So the answer is: O.K. Connery.", "O.K. Connery"),
    ("U.S. Navy", "U.S. Navy"),
    ("So the answer is: U.S. Navy.", "U.S. Navy"),
    ("No. 5 Squadron", "No. 5 Squadron"),
    ("So the answer is: No. 5 Squadron.", "No. 5 Squadron"),
    ("No. They were born in different countries.", "no"),
    ("Berlin\nBerlin is the capital of Germany.", "Berlin"),
    ("\n\nBerlin\n", "Berlin"),
    ("He was born in 1901. So the answer is: 1901.", "1901"),
    ("The film came out first. The answer is X.\nSo the answer is: Y.", "Y"),
    ("[5] Waking the Dead (film)", "Waking the Dead (film)"),
    ("1) Everybody's Hobby", "Everybody's Hobby"),
    ("1) How Moscha Came Back: The film is a 1954 drama film about", "How Moscha Came Back"),
    ("The Romance of Max: The Romance of Max is a 1912 French short film.", "The Romance of Max"),
    ("[2] Oslo: Oslo is the capital of Norway.", "Oslo"),
    ("Date of birth: 3 May 1901", "Date of birth: 3 May 1901"),
    ("1901.", "1901"),
    ("", ""),
    ("   ", ""),
]


@pytest.mark.parametrize("text, expected", CASES)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_find_answer_needs_a_marker():
    assert find_answer("Lothar was born in Rome.") is None
    assert find_answer("So the answer is: Rome.") == "Rome"
    assert find_answer("So the answer is:") is None


def test_extract_from_end_takes_the_last_line_of_a_chain():
    chain = "The film was directed by Ann Lee.\nAnn Lee died in Oslo"
    assert extract_answer(chain) == "The film was directed by Ann Lee"
    assert extract_answer(chain, from_end=True) == "Ann Lee died in Oslo"


def test_first_sentence_skips_initials_and_abbreviations():
    assert first_sentence("Dr. No is a film. It was made in 1962.") == "Dr. No is a film."
    assert first_sentence("Born 3 Jan. 1900 in Rome. Died later.") == "Born 3 Jan. 1900 in Rome."
    assert first_sentence("Why? Because.") == "Why?"
    assert first_sentence("no end") == "no end"
    assert first_sentence("He served in the U.S. Navy. Later he taught.") == "He served in the U.S. Navy."


def test_clean_answer_keeps_inner_punctuation():
    assert clean_answer("Los Angeles, California.") == "Los Angeles, California"
    assert clean_answer("Where Are You Going?") == "Where Are You Going?"


def test_a_short_first_line_is_the_answer_whatever_follows():
    assert extract_answer("Aivar Kuusmaa\n\nThe answer is: 1347") == "Aivar Kuusmaa"
    assert extract_answer("\nOslo.\nPassages:\n[1] Bergen: a city") == "Oslo"
    assert extract_answer("He was born in Oslo in the year 1901.\nSo the answer is: Oslo.") == "Oslo"
    assert extract_answer("Aivar Kuusmaa\nSo the answer is: 1347", from_end=True) == "1347"

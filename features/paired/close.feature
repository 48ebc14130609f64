@needs:paired-namespaces
Feature: Closing and faulting the paired factories
  In a process hosting the syphon, a factory that faults or closes without its partner gets
  the partner faulted 5 seconds later, unless the partner closed by itself.

  @PAIR-CLOSE-001
  Scenario Outline: A partner that closes within 5 seconds ends closed, not faulted
    Given factory "S" paired with 1 backlog queue, running the syphon
    When the <first> factory of "S" <ends>
    And the pairing runs for 3 seconds
    And the <second> factory of "S" closes
    And the pairing runs for 10 seconds
    Then the <first> factory of "S" is <ended>
    And the <second> factory of "S" is closed

    Examples:
      | first     | ends   | ended   | second    |
      | primary   | closes | closed  | secondary |
      | primary   | faults | faulted | secondary |
      | secondary | closes | closed  | primary   |
      | secondary | faults | faulted | primary   |

  @PAIR-CLOSE-001 @PAIR-CLOSE-002
  Scenario: Without the syphon in the process, nothing is faulted
    Given factory "F" paired with 1 backlog queue
    When the primary factory of "F" closes
    And the pairing runs for 30 seconds
    Then the secondary factory of "F" is open

  @PAIR-CLOSE-002
  Scenario Outline: The syphon faults the partner still open 5 seconds later
    Given a queue "q"
    And factory "S" paired with 1 backlog queue, running the syphon
    When the <first> factory of "S" <ends>
    And the pairing runs for 4 seconds
    Then the <second> factory of "S" is open
    When the pairing runs for 1 second
    Then the <second> factory of "S" is faulted
    And the <first> factory of "S" is <ended>
    When factory "S" sends "m1" to "q"
    Then the operation fails with "invalid-operation"
    And peeking "q" shows nothing

    Examples:
      | first     | ends   | ended   | second    |
      | primary   | closes | closed  | secondary |
      | primary   | faults | faulted | secondary |
      | secondary | closes | closed  | primary   |
      | secondary | faults | faulted | primary   |
